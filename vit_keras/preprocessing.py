"""`preprocess_input`: turn RGB images in [0, 255] into what a vit_keras model takes, eagerly or inside a graph; and
the size a NaFlex model's images are resized to: `naflex_size`, with its TensorFlow twin `naflex_size_graph` beside
it, which `tf.data` pipelines and exported signatures compute in the graph."""

from __future__ import annotations

import math
import numbers

import keras
import numpy as np

from vit_keras.configs import check_positive_int
from vit_keras.limits import MAX_PIXELS_ENV, max_image_pixels

DATA_FORMATS = ("channels_last", "channels_first")


def _check_data_format(data_format):
    if data_format is None:
        return keras.config.image_data_format()
    if data_format not in DATA_FORMATS:
        raise ValueError(
            f"`data_format` must be 'channels_last', 'channels_first' or None (keras.config.image_data_format()), "
            f"got {data_format!r}."
        )
    return data_format


def _is_tensor(images) -> bool:
    # KerasTensors (a functional model's graph) and backend tensors (tf.Tensor, tf.Variable) stay tensors;
    # NumPy arrays, lists and scalars come back as NumPy arrays, as keras.applications does.
    return keras.backend.is_keras_tensor(images) or keras.ops.is_tensor(images)


def preprocess_input(images, include_preprocessing=True, data_format=None):
    """Prepare RGB images in [0, 255] for a vit_keras model, as float32.

    Models built with `include_preprocessing=True` (the default) rescale inside the graph, so this returns the
    images unchanged, as float32. For a model built with `include_preprocessing=False`, pass
    `include_preprocessing=False`: it maps [0, 255] to the [-1, 1] range the checkpoints were trained on, which
    is keras.applications' "tf" mode (`x / 127.5 - 1`).

    Works on NumPy arrays (returns a NumPy array), backend tensors and symbolic Keras tensors inside a functional
    model (returns a tensor). `data_format` (None: `keras.config.image_data_format()`) is checked and accepted for
    keras.applications compatibility; the "tf" mode scales every channel alike, so the layout does not change
    the result.

    Example:
        >>> preprocess_input(np.array([[0.0, 255.0]]), include_preprocessing=False)
        array([[-1.,  1.]], dtype=float32)
        >>> inputs = keras.Input((224, 224, 3))
        >>> preprocess_input(inputs, include_preprocessing=False).shape
        (None, 224, 224, 3)
    """
    _check_data_format(data_format)
    if not isinstance(include_preprocessing, bool | np.bool_):
        raise ValueError(
            f"`include_preprocessing` must be True or False (the value the model was built with), got "
            f"{include_preprocessing!r}."
        )
    if _is_tensor(images):
        images = keras.ops.cast(images, "float32")
        if include_preprocessing:
            return images
        return images / 127.5 - 1.0
    try:
        images = np.asarray(images, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"`images` must be a numeric array or tensor of RGB values in [0, 255], got {type(images).__name__} "
            f"({error})."
        ) from error
    if include_preprocessing:
        return images
    return images / np.float32(127.5) - np.float32(1.0)


# The most patches one NaFlex image may be cut into (`max_num_patches`, `--max-patches`, `--max-num-patches`). The
# attention of a flexible model holds N x N float32 scores per head per image: 1 GiB at N = 16,384, so that one
# image through one ViT-B/16 layer (12 heads) already needs 12 GiB, about what an accelerator can give a layer. Above
# it a single image cannot run (N = 100,000 would be 37 GiB per head), and the padded batch and the resized image
# grow with N too, so sizes above it are refused before anything is allocated. SigLIP 2 uses 256 to 1,024.
MAX_NUM_PATCHES = 16_384


def check_max_num_patches(max_num_patches, patch_size=None, name: str = "`max_num_patches`") -> int:
    """`max_num_patches` as an int when it is a positive integer of at most `MAX_NUM_PATCHES`, else a `ValueError`
    naming `name` (the argument or command-line flag), the limit and the fix. With `patch_size`, an image of that
    many patches (N·P² pixels, the largest a NaFlex resize makes) must also stay within the image pixel limit
    (`vit_keras.limits.max_image_pixels()`).

    Example:
        >>> check_max_num_patches(256, patch_size=16)
        256
        >>> check_max_num_patches(100_000)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: `max_num_patches` is 100,000 patches, above the limit of 16,384 ...
    """
    if isinstance(max_num_patches, bool) or not isinstance(max_num_patches, numbers.Integral) or max_num_patches < 1:
        raise ValueError(f"{name} must be a positive integer, got {max_num_patches!r} (patches per image).")
    max_num_patches = int(max_num_patches)
    if max_num_patches > MAX_NUM_PATCHES:
        gib = max_num_patches ** 2 * 4 / 2 ** 30
        raise ValueError(
            f"{name} is {max_num_patches:,} patches, above the limit of {MAX_NUM_PATCHES:,} "
            f"(vit_keras.preprocessing.MAX_NUM_PATCHES): the attention scores of one such image would take "
            f"{gib:,.0f} GiB per head. Use at most {MAX_NUM_PATCHES:,} patches per image (SigLIP 2 uses 256 to "
            "1,024), or a larger patch size for large images.")
    if patch_size is not None:
        patch_size = check_positive_int("patch_size", patch_size)
        pixels, limit = max_num_patches * patch_size ** 2, max_image_pixels()
        if pixels > limit:
            raise ValueError(
                f"{name} {max_num_patches:,} patches of {patch_size}x{patch_size} pixels make images of up to "
                f"{pixels:,} pixels, above the image limit of {limit:,} pixels; use fewer patches (at most "
                f"{limit // patch_size ** 2:,} of this size), or raise the limit with {MAX_PIXELS_ENV}.")
    return max_num_patches


def _scaled_side(scale: float, size: int, patch_size: int) -> int:
    # transformers' get_scaled_image_size: round up to whole patches, at least one patch.
    return int(max(patch_size, math.ceil(size * scale / patch_size) * patch_size))


NAFLEX_EPS = 1e-5  # transformers' get_image_size_for_max_num_patches bisection width
_LARGEST_SCALE = 100.0  # where that bisection starts from above

# transformers' bisection starts at eps / 10; an image whose long side is more than about 10 / eps times its patch
# budget does not fit even there, and the search below that scale halves it this many times (any size a float64
# holds is then within one patch of the exact answer).
_FINE_BISECTION_STEPS = 200


def _patch_count(scale: float, height: int, width: int, patch_size: int) -> int:
    return (_scaled_side(scale, height, patch_size) // patch_size) * (_scaled_side(scale, width, patch_size)
                                                                      // patch_size)


def naflex_size(height, width, patch_size, max_num_patches, eps: float = NAFLEX_EPS) -> tuple[int, int]:
    """The size SigLIP 2 NaFlex resizes an image of `height` x `width` to: the aspect ratio kept as far as whole
    patches allow, both sides multiples of `patch_size` (at least one patch each), at most `max_num_patches`
    patches (at most `MAX_NUM_PATCHES`). Exactly transformers' `Siglip2ImageProcessor`
    (`get_image_size_for_max_num_patches`: a bisection over the scale, `eps` its stopping width), so that images
    are cut into the same patches; images smaller than a patch are scaled up to one, as there.

    For extreme aspect ratios (a side more than about 10 / `eps` patches per patch of the budget), where
    transformers' search starts above every scale that fits and returns more patches than the budget, the search
    goes on below that scale: the result never exceeds `max_num_patches`.

    Example:
        >>> naflex_size(480, 640, patch_size=16, max_num_patches=256)
        (224, 288)
        >>> naflex_size(100, 700, 16, 256)
        (96, 672)
        >>> naflex_size(10**9, 1, 8, 16)
        (128, 8)
    """
    for name, value in (("height", height), ("width", width), ("patch_size", patch_size)):
        check_positive_int(name, value)
    max_num_patches = check_max_num_patches(max_num_patches)
    height, width, patch_size = int(height), int(width), int(patch_size)
    scale_min, scale_max = eps / 10, _LARGEST_SCALE
    while (scale_max - scale_min) >= eps:
        scale = (scale_min + scale_max) / 2
        rows = _scaled_side(scale, height, patch_size) / patch_size
        cols = _scaled_side(scale, width, patch_size) / patch_size
        if rows * cols <= max_num_patches:
            scale_min = scale
        else:
            scale_max = scale
    if _patch_count(scale_min, height, width, patch_size) > max_num_patches:
        # No scale tried fits: search (0, eps / 10], where a scale of 0 is one patch per side.
        low, high = 0.0, scale_min
        for _ in range(_FINE_BISECTION_STEPS):
            scale = (low + high) / 2
            if _patch_count(scale, height, width, patch_size) <= max_num_patches:
                low = scale
            else:
                high = scale
        scale_min = low
    return _scaled_side(scale_min, height, patch_size), _scaled_side(scale_min, width, patch_size)


def naflex_size_graph(height, width, patch_size: int, max_num_patches: int, eps: float = NAFLEX_EPS):
    """`naflex_size` as TensorFlow ops (`height`, `width` may be tensors): the same float64 bisections
    (transformers', then the one below its starting scale for extreme aspect ratios), so the same (height, width),
    as an int32 pair.

    Example:
        >>> [int(v) for v in naflex_size_graph(480, 640, 16, 256)]
        [224, 288]
        >>> [int(v) for v in naflex_size_graph(10**9, 1, 8, 16)]
        [128, 8]
    """
    import tensorflow as tf

    patch_size = check_positive_int("patch_size", patch_size)
    budget = tf.constant(float(check_max_num_patches(max_num_patches)), tf.float64)
    height, width = tf.cast(height, tf.float64), tf.cast(width, tf.float64)
    patch = tf.constant(float(patch_size), tf.float64)

    def side(scale, size):
        return tf.maximum(patch, tf.math.ceil(size * scale / patch) * patch)

    def fits(scale):
        return (side(scale, height) / patch) * (side(scale, width) / patch) <= budget

    def body(low, high):
        scale = (low + high) / 2
        scale_fits = fits(scale)
        return tf.where(scale_fits, scale, low), tf.where(scale_fits, high, scale)

    low, _ = tf.while_loop(lambda low, high: (high - low) >= eps, body,
                           (tf.constant(eps / 10, tf.float64), tf.constant(_LARGEST_SCALE, tf.float64)))
    # No scale tried fits (an extreme aspect ratio): search (0, eps / 10], as naflex_size does.
    def fine(high):
        return tf.while_loop(lambda low, high: True, body, (tf.zeros_like(high), high),
                             maximum_iterations=_FINE_BISECTION_STEPS)[0]

    low = tf.cond(fits(low), lambda: low, lambda: fine(low))
    return tf.cast(side(low, height), tf.int32), tf.cast(side(low, width), tf.int32)
