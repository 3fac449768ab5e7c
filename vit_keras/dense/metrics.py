"""The metrics of the DINOv2/DINOv3 dense evaluations: mean IoU for segmentation; RMSE and the threshold accuracy
δ1 (the share of pixels whose predicted depth is within a factor 1.25 of the truth) for depth."""

from __future__ import annotations

import keras
from keras import ops

DELTA1 = 1.25


def segmentation_metrics(num_classes: int) -> list:
    """mIoU (over the argmax of the logits) and pixel accuracy, for `model.compile(metrics=...)` with integer labels
    `(B, H, W)`.

    Example:
        >>> [m.name for m in segmentation_metrics(3)]
        ['mean_iou', 'pixel_accuracy']
    """
    return [keras.metrics.MeanIoU(num_classes, sparse_y_true=True, sparse_y_pred=False, name="mean_iou"),
            keras.metrics.SparseCategoricalAccuracy(name="pixel_accuracy")]


def _threshold_accuracy(y_true, y_pred, threshold):
    """Per image: the share of pixels with a depth (`y_true > 0`) whose prediction is within `threshold`x of it."""
    y_true = ops.reshape(ops.cast(y_true, "float32"), (ops.shape(y_true)[0], -1))
    y_pred = ops.reshape(ops.cast(y_pred, "float32"), (ops.shape(y_pred)[0], -1))
    valid = ops.cast(y_true > 0, "float32")
    eps = 1e-6
    ratio = ops.maximum((y_pred + eps) / (y_true + eps), (y_true + eps) / (y_pred + eps))
    within = ops.cast(ratio < threshold, "float32") * valid
    return ops.sum(within, axis=1) / ops.maximum(ops.sum(valid, axis=1), 1.0)


@keras.saving.register_keras_serializable(package="vit_keras")
class DepthThresholdAccuracy(keras.metrics.MeanMetricWrapper):
    """δ (default δ1: `threshold=1.25`): the share of pixels with a ground-truth depth (> 0) whose predicted depth
    is within `threshold` times it, averaged over images.

    Example:
        >>> metric = DepthThresholdAccuracy()
        >>> metric.update_state(np.ones((1, 2, 2, 1)), np.array([[[[1.1], [2.0]], [[0.9], [1.0]]]]))
        >>> float(metric.result())
        0.75
    """

    def __init__(self, threshold: float = DELTA1, name: str = "delta1", dtype=None):
        super().__init__(_threshold_accuracy, name=name, dtype=dtype, threshold=float(threshold))
        self.threshold = float(threshold)

    def get_config(self):
        return {"threshold": self.threshold, "name": self.name, "dtype": self.dtype}


def depth_metrics() -> list:
    """RMSE and δ1, for `model.compile(metrics=...)` with depth maps `(B, H, W, 1)` (0: no depth)."""
    return [keras.metrics.RootMeanSquaredError(name="rmse"), DepthThresholdAccuracy()]
