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

    Built with an unknown height or width (`(None, None, C)` images), it takes any multiple of `patch_size` at
    call time; `flatten=False` keeps the grid, `(batch, H/P, W/P, P·P·C)`, for a `PatchEncoder` that resamples
    its position embeddings to it.

    Example:
        >>> x = keras.ops.zeros((2, 32, 48, 3))
        >>> tuple(Patches(16)(x).shape)
        (2, 6, 768)
        >>> tuple(Patches(16, flatten=False)(x).shape)
        (2, 2, 3, 768)
    """

    def __init__(self, patch_size: int, flatten: bool = True, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(patch_size, int) or patch_size < 1:
            raise ValueError(f"`patch_size` must be a positive int, got {patch_size!r}.")
        self.patch_size = patch_size
        self.flatten = bool(flatten)

    def build(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(f"Patches expects (batch, height, width, channels) input, got shape {input_shape}.")
        height, width, channels = input_shape[1:]
        if channels is None:
            raise ValueError(f"Patches needs a known number of channels, got input shape {input_shape}.")
        if (height is None or width is None) and self.flatten:
            raise ValueError(
                f"Patches needs a static image size to flatten the grid (got {input_shape}); pass `image_size` "
                "when building the model, or use flatten=False."
            )
        what = f"patch_size {self.patch_size}"
        if 0 in (height, width):
            raise ValueError(empty_error(height, width, self.patch_size, what))
        for label, size in (("height", height), ("width", width)):
            if size is not None and size % self.patch_size:
                raise ValueError(size_error(label, size, self.patch_size, what))
        self.grid_size = tuple(None if size is None else size // self.patch_size for size in (height, width))
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
        if None in self.grid_size:
            images = check_divisible(images, p, f"patch_size {p}")
        gh, gw = (_cells(ops.shape(images)[axis], p) if cells is None else cells
                  for axis, cells in zip((1, 2), self.grid_size))
        # The batch is taken from the input, never inferred by reshape: a wrong-sized image must fail, not
        # turn into a different number of rows.
        batch = ops.shape(images)[0]
        x = ops.reshape(images, (batch, gh, p, gw, p, self.channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        if not self.flatten:
            return ops.reshape(x, (batch, gh, gw, p * p * self.channels))
        return ops.reshape(x, (batch, gh * gw, p * p * self.channels))

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        p = self.patch_size
        rows, cols = (None if size is None else size // p for size in (height, width))
        if not self.flatten:
            return (batch, rows, cols, p * p * channels)
        return (batch, None if None in (rows, cols) else rows * cols, p * p * channels)

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size, "flatten": self.flatten}


def _cells(size, patch_size: int):
    """How many patches fit along a side: `size // patch_size`, and at least 1 for a size known only at run time.

    A side of 0 then gets one row of patches, which cannot hold 0 pixels: the patch reshape fails where the run-time
    assertion of `check_divisible` is dropped (XLA), instead of answering for an empty image.
    """
    if isinstance(size, int):
        return size // patch_size  # a static size, checked before
    return ops.maximum(size // patch_size, 1)


def size_error(label: str, size: int, divisor: int, what: str) -> str:
    """The message for an image side that is not a multiple of what the model cuts it by.

    Example:
        >>> size_error("height", 36, 8, "patch_size 8")
        'Image height 36 is not divisible by patch_size 8; use 32 or 40 instead.'
        >>> size_error("width", 5, 8, "patch_size 8")
        'Image width 5 is not divisible by patch_size 8; use 8 instead.'
    """
    lower, upper = (size // divisor) * divisor, (size // divisor + 1) * divisor
    sizes = f"{lower} or {upper}" if lower else f"{upper}"
    return f"Image {label} {size} is not divisible by {what}; use {sizes} instead."


def empty_error(height, width, divisor: int, what: str) -> str:
    """The message for an image of height or width 0, which has no patch to compute on.

    Example:
        >>> empty_error(0, 16, 8, "patch_size 8").split(":")[0]
        'Image size 0x16 (height x width) is empty; the smallest image this model takes is 8x8 (patch_size 8)'
    """
    height, width = ("any" if size is None else size for size in (height, width))
    return (f"Image size {height}x{width} (height x width) is empty; the smallest image this model takes is "
            f"{divisor}x{divisor} ({what}): pass images whose height and width are positive multiples of {divisor}.")


def check_divisible(images, divisor: int, what: str):
    """`images` `(batch, H, W, C)`, after checking that H and W are positive multiples of `divisor` (`what` names
    it): 0 is a multiple of every divisor, but an empty image has no patch to compute on.

    A static size is checked here (a `ValueError`); a size unknown until run time (a TensorFlow graph traced with
    `None` height or width) gets a run-time assertion whose message names the divisor and the received size.

    Example:
        >>> tuple(check_divisible(keras.ops.zeros((1, 32, 48, 3)), 16, "patch_size 16").shape)
        (1, 32, 48, 3)
    """
    height, width = images.shape[1:3]
    if 0 in (height, width):
        raise ValueError(empty_error(height, width, divisor, what))
    for label, size in (("height", height), ("width", width)):
        if size is not None and size % divisor:
            raise ValueError(size_error(label, size, divisor, what))
    if None not in (height, width) or keras.backend.backend() != "tensorflow":
        return images
    import tensorflow as tf

    size = tf.shape(images)[1:3]
    checks = [
        tf.debugging.Assert(
            tf.reduce_all(size > 0),
            [f"Image is empty (height or width 0); the smallest image this model takes is {divisor}x{divisor} "
             f"({what}). Received height and width:", size],
        ),
        tf.debugging.Assert(
            tf.reduce_all(tf.equal(size % divisor, 0)),
            [f"Image height and width must be multiples of {divisor} ({what}); resize the images. Received height "
             "and width:", size],
        ),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(images)


@keras.saving.register_keras_serializable(package="vit_keras")
class ImageSizeCheck(keras.layers.Layer):
    """Pass images through after checking that their height and width are positive multiples of `divisor`.

    It stands at the input of a hybrid built for any image size, whose ResNet stem would otherwise round an odd
    size up silently: the stem's stride times the patch size must divide the image.

    Example:
        >>> tuple(ImageSizeCheck(32, "the total stride 32")(keras.ops.zeros((1, 64, 96, 3))).shape)
        (1, 64, 96, 3)
    """

    def __init__(self, divisor: int, description: str, **kwargs):
        super().__init__(**kwargs)
        self.divisor = int(divisor)
        self.description = str(description)

    def call(self, images):
        return check_divisible(images, self.divisor, self.description)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "divisor": self.divisor, "description": self.description}
