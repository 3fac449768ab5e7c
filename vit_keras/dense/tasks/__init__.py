"""Published task models on a ViT, loaded exactly from their transformers checkpoints: EoMT universal segmentation,
Depth Anything monocular depth and ViTPose keypoints (`from_pretrained`), and written back as transformers
directories (`save_pretrained`); their outputs post-processed as the published image processors do
(`post_process_semantic_segmentation`, `post_process_depth_estimation`, `post_process_pose_estimation`).

Example:
    >>> from vit_keras.dense import tasks
    >>> model = tasks.from_pretrained("tests/fixtures/tasks/vitpose_simple/checkpoint")  # RGB in [0, 255]
    >>> {name: tuple(value.shape) for name, value in model(np.zeros((1, 32, 32, 3), "float32")).items()}
    {'heatmaps': (1, 16, 16, 5)}
"""

from vit_keras.dense.tasks.loader import from_pretrained
from vit_keras.dense.tasks.postprocess import (
    post_process_depth_estimation,
    post_process_pose_estimation,
    post_process_semantic_segmentation,
)
from vit_keras.dense.tasks.save import save_pretrained

__all__ = ["from_pretrained", "post_process_depth_estimation", "post_process_pose_estimation",
           "post_process_semantic_segmentation", "save_pretrained"]
