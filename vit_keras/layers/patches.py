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

    @property
    def image_size(self) -> tuple:
        """The (height, width) this layer was built for; a `None` entry takes any multiple of `patch_size`."""
        return tuple(None if cells is None else cells * self.patch_size for cells in self.grid_size)

    def _size_error(self, received: str) -> str:
        height, width = ("any" if size is None else size for size in self.image_size)
        return (
            f"Patches (patch_size {self.patch_size}) was built for {height}x{width} images with {self.channels} "
            f"channels, but received {received}; resize the images to {height}x{width} "
            "(e.g. tf.image.resize) or build the model with the image_size you need."
        )

    def _check_size(self, images):
        """Refuse images of another size than the layer was built for, instead of reshaping them into the
        wrong number of rows: Keras checks a model's input shape only against the shapes it traces, and
        `model.predict` retraces with unknown height and width once it has seen a second size."""
        expected = (*self.image_size, self.channels)
        received = tuple(images.shape[1:])
        if len(received) != 3 or any(
            want is not None and got is not None and want != got for want, got in zip(expected, received)
        ):
            raise ValueError(self._size_error(f"images of shape {(None, *received)}"))
        unknown = [axis for axis, (want, got) in enumerate(zip(expected, received)) if want is not None and got is None]
        if not unknown or keras.backend.backend() != "tensorflow":
            return images  # other backends trace with concrete shapes, already checked above
        import tensorflow as tf

        axes = [axis + 1 for axis in unknown]
        actual = tf.gather(tf.shape(images), axes)
        wanted = tf.constant([expected[axis] for axis in unknown], dtype=actual.dtype)
        names = "/".join(("height", "width", "channels")[axis] for axis in unknown)
        check = tf.debugging.assert_equal(
            actual, wanted, message=self._size_error(f"images of another {names} (received: x, expected: y below)"),
        )
        with tf.control_dependencies([check]):
            return tf.identity(images)

    def call(self, images):
        images = self._check_size(images)
        p = self.patch_size
        gh, gw = self.grid_size
        # The batch is taken from the input, never inferred by reshape: a wrong-sized image must fail, not
        # turn into a different number of rows.
        batch = ops.shape(images)[0]
        x = ops.reshape(images, (batch, gh, p, gw, p, self.channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        return ops.reshape(x, (batch, gh * gw, p * p * self.channels))

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        p = self.patch_size
        return (batch, (height // p) * (width // p), p * p * channels)

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size}
