"""The metrics of the DINOv2/DINOv3 dense evaluations: mean IoU for segmentation; RMSE and the threshold accuracy
δ1 (the share of pixels whose predicted depth is within a factor 1.25 of the truth) for depth, and the depth loss.

Which pixels count:
- Segmentation: a pixel labelled `ignore_index` (default 255, mmsegmentation's and ADE20K's convention) or a
  negative label (-1) is not scored. Any other label outside `[0, num_classes)` counts as an error of the model (a
  class no logit names), so a wrong `num_classes` shows as a low score, never a high one.
- Depth: a pixel has a depth where the target is finite and > 0 (0 marks "no depth", as in NYU-Depth v2 and
  KITTI); RMSE, δ1 and `depth_loss` all read those pixels only, so NaN, inf or negative targets are left out
  rather than turning the loss into NaN.
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras.dense.heads import positive_int

DELTA1 = 1.25
IGNORE_INDEX = 255


def _scored(y_true, ignore_index: int):
    """The labels as int32 and the mask of the pixels scored (not ignore_index, not negative)."""
    y_true = ops.cast(y_true, "int32")
    return y_true, ops.logical_and(y_true >= 0, ops.not_equal(y_true, ignore_index))


def _weighted(mask, sample_weight):
    weight = ops.cast(mask, "float32")
    return weight if sample_weight is None else weight * ops.cast(sample_weight, "float32")


@keras.saving.register_keras_serializable(package="vit_keras")
class SegmentationMeanIoU(keras.metrics.IoU):
    """Mean IoU over `num_classes` from logits `(B, H, W, num_classes)` and integer labels `(B, H, W)`: pixels
    labelled `ignore_index` or negative are not scored; other labels outside the classes count as errors.

    Example:
        >>> metric = SegmentationMeanIoU(2)
        >>> metric.update_state(np.array([[0, 1, 255, 5]]), np.eye(2)[[[0, 1, 1, 1]]])
        >>> round(float(metric.result()), 3)  # class 1: 1 right of 2 predicted (the label 5 is no class)
        0.75
    """

    def __init__(self, num_classes: int, ignore_index: int = IGNORE_INDEX, name: str = "mean_iou", dtype=None):
        self.classes, self.ignore_index = positive_int(num_classes, "num_classes"), int(ignore_index)
        # one more row for labels no class has: they count against the predicted class, and are not averaged
        super().__init__(self.classes + 1, target_class_ids=list(range(self.classes)), name=name, dtype=dtype,
                         sparse_y_true=True, sparse_y_pred=False)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true, scored = _scored(y_true, self.ignore_index)
        y_true = ops.where(scored, ops.minimum(y_true, self.classes), 0)
        weight = ops.cast(scored, "int32") if sample_weight is None else _weighted(scored, sample_weight)
        super().update_state(y_true, y_pred, weight)

    def get_config(self):
        return {"num_classes": self.classes, "ignore_index": self.ignore_index, "name": self.name,
                "dtype": self.dtype}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


@keras.saving.register_keras_serializable(package="vit_keras")
class SegmentationAccuracy(keras.metrics.SparseCategoricalAccuracy):
    """Pixel accuracy over the scored pixels (not `ignore_index`, not negative)."""

    def __init__(self, ignore_index: int = IGNORE_INDEX, name: str = "pixel_accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.ignore_index = int(ignore_index)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true, scored = _scored(y_true, self.ignore_index)
        super().update_state(ops.where(scored, y_true, 0), y_pred, _weighted(scored, sample_weight))

    def get_config(self):
        return {"ignore_index": self.ignore_index, "name": self.name, "dtype": self.dtype}


def segmentation_metrics(num_classes: int, ignore_index: int = IGNORE_INDEX) -> list:
    """mIoU (over the argmax of the logits) and pixel accuracy, for `model.compile(metrics=...)` with integer labels
    `(B, H, W)`; pixels labelled `ignore_index` (default 255) or negative are not scored.

    Example:
        >>> [m.name for m in segmentation_metrics(3)]
        ['mean_iou', 'pixel_accuracy']
    """
    return [SegmentationMeanIoU(num_classes, ignore_index), SegmentationAccuracy(ignore_index)]


def _with_depth(y_true):
    """The target as float32 with 1 where it has no depth, and the mask of the pixels with a depth (finite, > 0)."""
    y_true = ops.cast(y_true, "float32")
    valid = ops.logical_and(ops.isfinite(y_true), y_true > 0)
    return ops.where(valid, y_true, 1.0), valid


def _threshold_accuracy(y_true, y_pred, threshold):
    """Per image: the share of pixels with a depth (`y_true > 0`) whose prediction is within `threshold`x of it."""
    y_true, valid = _with_depth(y_true)
    y_true = ops.reshape(y_true, (ops.shape(y_true)[0], -1))
    y_pred = ops.reshape(ops.cast(y_pred, "float32"), (ops.shape(y_pred)[0], -1))
    valid = ops.reshape(ops.cast(valid, "float32"), (ops.shape(valid)[0], -1))
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


@keras.saving.register_keras_serializable(package="vit_keras")
class DepthRMSE(keras.metrics.RootMeanSquaredError):
    """Root mean squared error over the pixels with a depth (finite, > 0), as δ1 counts them.

    Example:
        >>> metric = DepthRMSE()
        >>> metric.update_state(np.array([[1.0, 0.0, np.nan]]), np.array([[3.0, 5.0, 1.0]]))
        >>> float(metric.result())
        2.0
    """

    def __init__(self, name: str = "rmse", dtype=None):
        super().__init__(name=name, dtype=dtype)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true, valid = _with_depth(y_true)
        super().update_state(y_true, ops.where(valid, ops.cast(y_pred, "float32"), 1.0),
                             _weighted(valid, sample_weight))


def depth_loss(y_true, y_pred):
    """Mean squared error over each image's pixels with a depth (finite, > 0): for `model.compile(loss=...)`;
    targets of 0, negative, NaN or inf are left out instead of making the loss NaN.

    Example:
        >>> float(np.mean(depth_loss(np.array([[[[2.0], [np.nan]]]]), np.array([[[[1.0], [7.0]]]]))))
        1.0
    """
    y_true, valid = _with_depth(y_true)
    valid = ops.cast(valid, "float32")
    error = ops.square(ops.where(valid > 0, ops.cast(y_pred, "float32") - y_true, 0.0))
    axes = tuple(range(1, len(error.shape)))
    return ops.sum(error, axis=axes) / ops.maximum(ops.sum(valid, axis=axes), 1.0)


def depth_metrics() -> list:
    """RMSE and δ1 over the pixels with a depth, for `model.compile(metrics=...)` with depth maps `(B, H, W, 1)`
    (0, or a non-finite value: no depth)."""
    return [DepthRMSE(), DepthThresholdAccuracy()]
