"""vit-keras 0.2.0's `visualize.attention_map`, on `vit_keras.inspection`'s attention rollout.

Warns once (FutureWarning) with what to use instead; see the README's migration table.

Example:
    >>> from vit_keras import visualize, vit
    >>> model = vit.build_model(image_size=32, patch_size=8, num_layers=2, hidden_size=48, num_heads=3,
    ...                         name="tiny", mlp_dim=96, classes=10)
    >>> image = np.random.default_rng(0).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    >>> visualize.attention_map(model, image).shape
    (40, 50, 3)
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
        >>> from vit_keras import visualize, vit
        >>> model = vit.build_model(image_size=32, patch_size=8, num_layers=2, hidden_size=48, num_heads=3,
        ...                         name="tiny", mlp_dim=96, classes=10)
        >>> overlay = visualize.attention_map(model=model, image=np.zeros((32, 32, 3), np.uint8))
        >>> overlay.dtype
        dtype('uint8')
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
