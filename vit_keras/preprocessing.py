"""`preprocess_input`: turn RGB images in [0, 255] into what a vit_keras model takes, eagerly or inside a graph."""

from __future__ import annotations

import math
import numbers

import keras
import numpy as np

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


def _check_size_argument(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    return int(value)


def _scaled_side(scale: float, size: int, patch_size: int) -> int:
    # transformers' get_scaled_image_size: round up to whole patches, at least one patch.
    return int(max(patch_size, math.ceil(size * scale / patch_size) * patch_size))


def naflex_size(height, width, patch_size, max_num_patches, eps: float = 1e-5) -> tuple[int, int]:
    """The size SigLIP 2 NaFlex resizes an image of `height` x `width` to: the aspect ratio kept as far as whole
    patches allow, both sides multiples of `patch_size` (at least one patch each), at most `max_num_patches`
    patches. Exactly transformers' `Siglip2ImageProcessor` (`get_image_size_for_max_num_patches`: a bisection
    over the scale, `eps` its stopping width), so that images are cut into the same patches; images smaller than a
    patch are scaled up to one, as there.

    Example:
        >>> naflex_size(480, 640, patch_size=16, max_num_patches=256)
        (224, 288)
        >>> naflex_size(100, 700, 16, 256)
        (96, 672)
    """
    for name, value in (("height", height), ("width", width), ("patch_size", patch_size),
                        ("max_num_patches", max_num_patches)):
        _check_size_argument(name, value)
    height, width, patch_size, max_num_patches = int(height), int(width), int(patch_size), int(max_num_patches)
    scale_min, scale_max = eps / 10, 100.0
    while (scale_max - scale_min) >= eps:
        scale = (scale_min + scale_max) / 2
        rows = _scaled_side(scale, height, patch_size) / patch_size
        cols = _scaled_side(scale, width, patch_size) / patch_size
        if rows * cols <= max_num_patches:
            scale_min = scale
        else:
            scale_max = scale
    return _scaled_side(scale_min, height, patch_size), _scaled_side(scale_min, width, patch_size)
