"""Published task models on a ViT, loaded exactly from their transformers checkpoints: EoMT universal segmentation,
Depth Anything monocular depth and ViTPose keypoints (`from_pretrained`).

Example:
    >>> from vit_keras.dense import tasks
    >>> sorted(tasks.from_pretrained("tests/fixtures/tasks/eomt/checkpoint").output_shape)
    ['class_queries_logits', 'masks_queries_logits']
"""

from vit_keras.dense.tasks.loader import from_pretrained

__all__ = ["from_pretrained"]
