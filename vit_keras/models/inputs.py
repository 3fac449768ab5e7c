"""The keras.applications-style arguments of every constructor: the input shape (`image_size`, `input_shape`,
`input_tensor`), the head options (`include_top`, `pooling`, `classes`) and the input normalisation, checked and
resolved before anything is built."""

from __future__ import annotations

import numbers

import keras

from vit_keras.configs import (
    ARCHITECTURAL_POS_INTERPOLATIONS,
    DEFAULT_IMAGE_SIZE,
    check_hw,
    check_positive_int,
    config_fields,
    translate_aliases,
)

INPUT_NAME = "images"


class _DefaultSize:
    """The `image_size` a constructor gets when none is passed: `input_shape`'s, or 224x224 (None means any size)."""

    def __repr__(self):
        return "224"


DEFAULT_SIZE = _DefaultSize()
def _refuse_channels_first(label, shape):
    """vit_keras models take channels-last images whatever `keras.config.image_data_format()` says (every layer
    inside is channels-last); a (channels, height, width) shape gets an error, not a model of 3-row images."""
    shape = tuple(shape)
    if len(shape) == 3 and shape[0] in (1, 3) and shape[-1] not in (1, 3):
        channels, height, width = shape
        raise ValueError(
            f"`{label}` gives the shape {shape}, which looks channels-first (channels, height, width). vit_keras "
            f"models take channels-last images (height, width, channels) whatever keras.config.image_data_format() "
            f"says (now {keras.config.image_data_format()!r}): pass {(height, width, channels)} and feed NHWC "
            "images, e.g. np.transpose(images, (0, 2, 3, 1)), or keras.layers.Permute((2, 3, 1)) in front of the "
            "model."
        )


def resolve_input_shape(image_size, input_shape, input_tensor, default=(DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE)):
    """One (height, width, channels) from the three ways keras.applications users describe the input.

    A height or width of None (`image_size=None`, `input_shape=(None, None, 3)`, or an `input_tensor` of unknown
    size) that no other argument fixes means a model that takes any image size.
    """
    candidates = []
    any_size = image_size is None
    if image_size is not None and image_size is not DEFAULT_SIZE:
        candidates.append(("image_size", (*check_hw("image_size", image_size), None)))
    if input_shape is not None:
        if not isinstance(input_shape, list | tuple) or len(input_shape) != 3:
            raise ValueError(
                f"`input_shape` must be (height, width, channels), e.g. (224, 224, 3), got {input_shape!r}."
            )
        _refuse_channels_first("input_shape", input_shape)
        candidates.append(("input_shape", tuple(input_shape)))
        any_size = any_size or input_shape[0] is None or input_shape[1] is None
    if input_tensor is not None:
        shape = tuple(input_tensor.shape)
        if len(shape) != 4:
            raise ValueError(
                f"`input_tensor` must be a 4-D (batch, height, width, channels) tensor, got shape {shape}."
            )
        _refuse_channels_first("input_tensor", shape[1:])
        candidates.append(("input_tensor", shape[1:]))
        any_size = any_size or shape[1] is None or shape[2] is None
    height = width = channels = None
    for label, (h, w, c) in candidates:
        for dim, value, current in (("height", h, height), ("width", w, width), ("channels", c, channels)):
            if value is not None and current is not None and value != current[1]:
                raise ValueError(
                    f"`{label}` gives {dim} {value} but `{current[0]}` gives {current[1]}; pass only one of "
                    "`image_size`, `input_shape` and `input_tensor`, or make them agree."
                )
        height = (label, h) if h is not None and height is None else height
        width = (label, w) if w is not None and width is None else width
        channels = (label, c) if c is not None and channels is None else channels
    channels = channels[1] if channels else 3
    if isinstance(channels, bool) or not isinstance(channels, numbers.Integral) or channels < 1:
        raise ValueError(f"The number of channels must be a positive int, got {channels!r}.")
    if any_size and (height is None or width is None):
        sides = [None if side is None else check_positive_int("image size", side[1]) for side in (height, width)]
        return sides[0], sides[1], int(channels)
    height = height[1] if height else default[0]
    width = width[1] if width else default[1]
    check_hw("image size", (height, width))
    return int(height), int(width), int(channels)


def check_architecture_arguments(architecture: dict) -> dict:
    """`ViT()`'s architecture keywords in `ViTConfig`'s vocabulary (`translate_aliases`); any other is refused."""
    architecture = translate_aliases(architecture)
    unknown = sorted(set(architecture) - set(config_fields()) - {"image_size"})
    if unknown:
        raise TypeError(
            f"ViT() got unknown arguments {unknown}. The architecture arguments are the ViTConfig fields "
            f"{sorted(set(config_fields()) - {'image_size'})} (and the older names `classifier`, `gelu_approximate`); "
            "the model arguments are include_top, include_preprocessing, weights, input_shape, input_tensor, "
            "pooling, classes, classifier_activation, name, interpolation, source_grid, dtype, head_tokens_only, "
            "flexible."
        )
    return architecture


def resolve_image_arguments(image_size, input_shape, input_tensor, flexible: bool, architecture: dict):
    """`(height, width, channels)` of the images a model takes (None: any), from `image_size`, `input_shape` and
    `input_tensor` as keras.applications takes them; a flexible model takes none of them."""
    if input_tensor is not None and not keras.backend.is_keras_tensor(input_tensor):
        raise ValueError("`input_tensor` must be a Keras tensor, e.g. the output of `keras.Input(...)`.")
    if flexible and (input_shape is not None or input_tensor is not None or image_size is not DEFAULT_SIZE):
        raise ValueError("A flexible (NaFlex) model takes a dict of `patches`, `grid` and `mask`, not images of one "
                         "size: drop `image_size`, `input_shape` and `input_tensor` (pos_grid= sets the stored "
                         "position grid).")
    height, width, channels = resolve_input_shape(None if flexible else image_size, input_shape, input_tensor)
    architectural = architecture.get("pos_interpolation") in ARCHITECTURAL_POS_INTERPOLATIONS
    fixed = height is not None and width is not None
    if fixed and not architectural and (architecture.get("pos_grid") is not None
                                        or architecture.get("pos_interpolation") is not None):
        raise ValueError("`pos_grid` and `pos_interpolation` describe the position embeddings of a model that takes "
                         "any image size (image_size=None); a fixed-size model stores them at its own grid. Drop "
                         "them, or pass image_size=None.")
    return height, width, channels
