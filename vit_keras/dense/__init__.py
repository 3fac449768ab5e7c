"""Dense prediction on ViT feature maps (`vit_keras.features`): ViTDet's simple feature pyramid, a linear
segmentation probe and a DPT-style head for segmentation and monocular depth, their metrics, and models that put
them on a backbone; and the published task models (EoMT, Depth Anything, ViTPose) loaded exactly from their
transformers checkpoints (`from_pretrained`, `vit_keras.dense.tasks`).

Example:
    >>> from vit_keras import dense
    >>> backbone = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
    ...                          mlp_dim=96, include_top=False)
    >>> model = dense.segmentation_model(backbone, num_classes=3)
    >>> model.output_shape
    (None, 32, 32, 3)
"""

from vit_keras.dense.deployment import dense_saved_model, dense_tflite
from vit_keras.dense.head_models import depth_model, segmentation_model
from vit_keras.dense.heads import DPTHead, LinearSegmentationHead
from vit_keras.dense.metrics import (
    DepthRMSE,
    DepthThresholdAccuracy,
    SegmentationAccuracy,
    SegmentationMeanIoU,
    depth_loss,
    depth_metrics,
    segmentation_metrics,
)
from vit_keras.dense.pyramid import SimpleFeaturePyramid
from vit_keras.dense.tasks import from_pretrained

__all__ = ["DPTHead", "DepthRMSE", "DepthThresholdAccuracy", "LinearSegmentationHead", "SegmentationAccuracy",
           "SegmentationMeanIoU", "SimpleFeaturePyramid", "dense_saved_model", "dense_tflite", "depth_loss",
           "depth_metrics", "depth_model", "from_pretrained", "segmentation_metrics", "segmentation_model"]
