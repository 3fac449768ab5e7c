"""Cut images into non-overlapping square patches, in the row-major order of the reference code."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="vit_keras")
class Patches(keras.layers.Layer):
    """Split `(batch, H, W, C)` images into `(batch, (H/P)·(W/P), P·P·C)` flattened patches.

    Patches are ordered row by row (then column), and each patch is flattened in (row, column,
    channel) order, so a Google `embedding/kernel` of shape `(P, P, C, D)` reshaped to `(P·P·C, D)`
    is exactly the matching linear projection.

    Example:
        >>> x = keras.ops.zeros((2, 32, 48, 3))
        >>> Patches(16)(x).shape
        (2, 6, 768)
    """

    def __init__(self, patch_size: int, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(patch_size, int) or patch_size < 1:
            raise ValueError(f"`patch_size` must be a positive int, got {patch_size!r}.")
        self.patch_size = patch_size

    def build(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(f"Patches expects (batch, height, width, channels) input, got shape {input_shape}.")
        height, width, channels = input_shape[1:]
        if height is None or width is None or channels is None:
            raise ValueError(
                f"Patches needs a static image size (got {input_shape}); pass `image_size` when building the model."
            )
        for label, size in (("height", height), ("width", width)):
            if size % self.patch_size:
                raise ValueError(
                    f"Image {label} {size} is not divisible by patch_size {self.patch_size}; "
                    f"use a multiple of {self.patch_size}, e.g. {size - size % self.patch_size or self.patch_size}."
                )
        self.grid_size = (height // self.patch_size, width // self.patch_size)
        self.channels = channels

    def call(self, images):
        p = self.patch_size
        gh, gw = self.grid_size
        x = ops.reshape(images, (-1, gh, p, gw, p, self.channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        return ops.reshape(x, (-1, gh * gw, p * p * self.channels))

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        p = self.patch_size
        return (batch, (height // p) * (width // p), p * p * channels)

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size}
