"""Published task models on a ViT, loaded exactly from their transformers checkpoints: EoMT universal segmentation,
Depth Anything monocular depth and ViTPose keypoints (`from_pretrained`), and written back as transformers
directories (`save_pretrained`); their outputs post-processed as the published image processors do
(`post_process_semantic_segmentation`, `post_process_depth_estimation`, `post_process_pose_estimation`).

Example:
    >>> from vit_keras.dense import tasks
    >>> sorted(tasks.post_process_depth_estimation(np.zeros((1, 14, 14)), target_sizes=[(20, 30)])[0].shape)
    [20, 30]
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
