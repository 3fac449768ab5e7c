"""Heads that turn ViT feature maps into per-pixel predictions: the linear probe of the DINOv2/DINOv3 papers'
segmentation evaluation, and a small DPT head (Ranftl et al., 2021) for segmentation and monocular depth.

Both take NHWC maps on the patch grid (`vit_keras.features.intermediate_model`) and the images (for the output
size), and return `(B, H, W, outputs)` at the images' size.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops


def positive_int(value, name: str) -> int:
    """`value` as an int, refused unless it is a positive integer (not a float, string or bool, which would be cut
    or misread).

    Example:
        >>> positive_int(2.7, "num_classes")
        Traceback (most recent call last):
        ValueError: num_classes must be a positive number of classes (an integer), got 2.7.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive number of {name.removeprefix('num_')} (an integer), got "
                         f"{value!r}.")
    return int(value)


def _resize_like(x, images):
    """`x` bilinearly resized to the spatial size of `images` (static sizes, as the export formats need them)."""
    height, width = images.shape[1], images.shape[2]
    if height is None or width is None:
        raise ValueError("Dense heads resize their output to the images' size, which must be known when the model "
                         "is built: build the backbone with a fixed image_size (vit_keras.from_pretrained(source, "
                         "any_image_size=False) keeps the checkpoint's own size).")
    return ops.image.resize(x, (height, width), interpolation="bilinear")


@keras.saving.register_keras_serializable(package="vit_keras")
class LinearSegmentationHead(keras.layers.Layer):
    """DINOv2's linear segmentation probe: the maps concatenated along channels, BatchNorm, a 1x1 convolution to
    `num_classes` logits, upsampled bilinearly to the image size.

    Example:
        >>> head = LinearSegmentationHead(num_classes=3)
        >>> tuple(head([np.zeros((2, 4, 4, 48), "float32")], np.zeros((2, 32, 32, 3), "float32")).shape)
        (2, 32, 32, 3)
    """

    def __init__(self, num_classes: int, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = positive_int(num_classes, "num_classes")
        self.norm = keras.layers.BatchNormalization(dtype=self.dtype_policy, name="bn")
        self.classifier = keras.layers.Conv2D(self.num_classes, 1, dtype=self.dtype_policy, name="conv_seg")

    def build(self, maps_shape, images_shape=None):
        shape = (*maps_shape[0][:-1], sum(s[-1] for s in maps_shape))
        self.norm.build(shape)
        self.classifier.build(shape)

    def call(self, maps, images, training=None):
        x = maps[0] if len(maps) == 1 else ops.concatenate(list(maps), axis=-1)
        return _resize_like(self.classifier(self.norm(x, training=training)), images)

    def compute_output_shape(self, maps_shape, images_shape=None):
        return (*images_shape[:3], self.num_classes)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


def _conv(filters, kernel, dtype, name, strides=1, activation=None):
    return keras.layers.Conv2D(filters, kernel, strides=strides, padding="same", activation=activation, dtype=dtype,
                               name=name)


@keras.saving.register_keras_serializable(package="vit_keras")
class DPTHead(keras.layers.Layer):
    """DPT: four maps of one ViT grid reassembled at 4x, 2x, 1x and 0.5x the grid, fused from the coarsest with
    residual convolution units, then a convolutional head to `num_outputs` at the image size.

    `num_outputs`: classes for segmentation (logits), 1 for depth (`activation="relu"`, as DPT's depth head).

    Example:
        >>> head = DPTHead(num_outputs=1, features=16, activation="relu")
        >>> maps = [np.zeros((2, 4, 4, 48), "float32")] * 4
        >>> tuple(head(maps, np.zeros((2, 32, 32, 3), "float32")).shape)
        (2, 32, 32, 1)
    """

    LEVELS = 4

    def __init__(self, num_outputs: int, features: int = 64, activation=None, **kwargs):
        super().__init__(**kwargs)
        self.num_outputs = positive_int(num_outputs, "num_outputs")
        self.features = positive_int(features, "features")
        self.activation = activation
        dtype = self.dtype_policy
        up = keras.layers.Conv2DTranspose
        self.resamplers = [up(self.features, 4, strides=4, dtype=dtype, name="reassemble_up4"),
                           up(self.features, 2, strides=2, dtype=dtype, name="reassemble_up2"),
                           _conv(self.features, 1, dtype, "reassemble_same"),
                           _conv(self.features, 3, dtype, "reassemble_down2", strides=2)]
        self.projections = [_conv(self.features, 3, dtype, f"layer{i + 1}_rn") for i in range(self.LEVELS)]
        # Each fusion: a residual unit on the skip (all but the coarsest, which starts the path), one on the sum,
        # then a 1x1 projection.
        self.skip_units = [self._residual_unit(f"fusion{i}_skip") for i in range(self.LEVELS - 1)]
        self.fused_units = [self._residual_unit(f"fusion{i}_out") for i in range(self.LEVELS)]
        self.fused_projections = [_conv(self.features, 1, dtype, f"fusion{i}_project") for i in range(self.LEVELS)]
        self.head = [_conv(self.features // 2, 3, dtype, "head_conv0"),
                     _conv(max(self.features // 4, 8), 3, dtype, "head_conv1", activation="relu"),
                     _conv(self.num_outputs, 1, dtype, "head_conv2", activation=activation)]

    def _residual_unit(self, name):
        return [_conv(self.features, 3, self.dtype_policy, f"{name}_conv0"),
                _conv(self.features, 3, self.dtype_policy, f"{name}_conv1")]

    def build(self, maps_shape, images_shape=None):
        if len(maps_shape) != self.LEVELS:
            raise ValueError(f"DPTHead takes {self.LEVELS} feature maps (e.g. blocks 3, 6, 9, 12 of a 12-block ViT), "
                             f"got {len(maps_shape)}.")
        batch, rows, cols, _ = maps_shape[0]
        sizes = [(rows * 4, cols * 4), (rows * 2, cols * 2), (rows, cols), ((rows + 1) // 2, (cols + 1) // 2)]
        for shape, resampler, projection, (r, c) in zip(maps_shape, self.resamplers, self.projections, sizes,
                                                         strict=True):
            resampler.build(shape)
            projection.build((batch, r, c, resampler.filters))
        feature_shape = (batch, rows, cols, self.features)
        for units in (*self.skip_units, *self.fused_units):
            for conv in units:
                conv.build(feature_shape)
        for conv in self.fused_projections:
            conv.build(feature_shape)
        shape = feature_shape
        for conv in self.head:
            conv.build(shape)
            shape = (*shape[:3], conv.filters)

    @staticmethod
    def _apply_unit(unit, x):
        y = unit[1](ops.relu(unit[0](ops.relu(x))))
        return x + y

    def call(self, maps, images):
        levels = [projection(resampler(m)) for m, resampler, projection in
                  zip(maps, self.resamplers, self.projections, strict=True)]
        path = None
        for i in reversed(range(self.LEVELS)):  # the coarsest first
            skip = levels[i]
            if path is None:
                x = skip
            else:
                if tuple(path.shape[1:3]) != tuple(skip.shape[1:3]):  # an odd grid: the coarsest level rounds up
                    path = ops.image.resize(path, tuple(skip.shape[1:3]), interpolation="bilinear")
                x = path + self._apply_unit(self.skip_units[i], skip)
            x = self._apply_unit(self.fused_units[i], x)
            x = ops.image.resize(x, (2 * x.shape[1], 2 * x.shape[2]), interpolation="bilinear")
            path = self.fused_projections[i](x)
        x = self.head[0](path)
        x = _resize_like(x, images)
        return self.head[2](self.head[1](x))

    def compute_output_shape(self, maps_shape, images_shape=None):
        return (*images_shape[:3], self.num_outputs)

    def get_config(self):
        return {**super().get_config(), "num_outputs": self.num_outputs, "features": self.features,
                "activation": self.activation}
