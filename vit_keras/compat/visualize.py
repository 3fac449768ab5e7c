"""vit-keras 0.2.0's `visualize.attention_map`, on `vit_keras.inspection`'s attention rollout.

Warns once (FutureWarning) with what to use instead; see the migration table in docs/migration.md.

Example:
    >>> from vit_keras import utils, visualize
    >>> overlay = visualize.attention_map(model, utils.read("dog.jpg", 384))  # doctest: +SKIP
"""

from __future__ import annotations

import keras
import numpy as np

from vit_keras import inspection, preprocessing
from vit_keras.compat.utils import _resize
from vit_keras.migration import warn_once


def _rescales_inside(model) -> bool:
    # Models built with include_preprocessing=True take [0, 255] images; vit_keras.vit's take [-1, 1] ones.
    try:
        return isinstance(model.get_layer("rescaling"), keras.layers.Rescaling)
    except ValueError:
        return False


def attention_map(model, image):
    """The image weighted by where the model's class token looks: attention rollout (Abnar & Zuidema, 2020; the
    paper's App. D.7) over all blocks, upsampled to the image and scaled to a maximum of 1.

    Args:
        model: a vit_keras model (e.g. from `vit_keras.vit.vit_b16`).
        image: an (H, W, 3) RGB image in [0, 255], any size; it is resized to the model's input and scaled as the
            model expects.

    Returns:
        `(mask * image)` as uint8, the same shape as `image`.

    Example:
        >>> overlay = visualize.attention_map(model=model, image=image)  # doctest: +SKIP
    """
    warn_once("vit_keras.visualize.attention_map",
              "vit_keras.inspection.attention_maps(model, images).rollout_image (and plot_attention_maps)")
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[-1] != 3:
        raise ValueError(f"`image` must be one (height, width, 3) RGB image, got shape {image.shape}.")
    height, width = model.input_shape[1], model.input_shape[2]
    resized = _resize(np.clip(image, 0, 255), (height, width))
    batch = preprocessing.preprocess_input(resized[np.newaxis], include_preprocessing=_rescales_inside(model))
    rollout = inspection.attention_maps(model, batch).rollout[0]
    mask = inspection.upsample(rollout / rollout.max(), image.shape[:2])[..., np.newaxis]
    return (mask * image).astype("uint8")
