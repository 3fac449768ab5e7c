"""Read the `ViTConfig` back off a built vit_keras model.

Every model `vit_keras.models.build_vit` makes is a `VisionTransformer` that carries its config (`vit_config`, also
through `.keras` save and load; files saved by 0.1.0 keep it in their `patch_encoder` layer, which it also reads).

Example:
    >>> import vit_keras
    >>> config_of(vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
    ...                         mlp_dim=96)).hidden_size
    48
"""

from __future__ import annotations

import keras

from vit_keras.configs import ViTConfig
from vit_keras.model_class import LEGACY_CONFIG_LAYER, VisionTransformer, legacy_architecture


def config_of(model) -> ViTConfig:
    """The `ViTConfig` a vit_keras model was built from (also after `.keras` save and load).

    Example:
        >>> import vit_keras
        >>> config_of(vit_keras.ViTTi16(image_size=32)).hidden_size
        192
    """
    config = model.vit_config if isinstance(model, VisionTransformer) else None
    if config is None:
        architecture = legacy_architecture(model) if isinstance(model, keras.Model) else None
        if architecture is None:
            raise ValueError(f"{getattr(model, 'name', model)!r} is not a vit_keras model (it carries no ViTConfig); "
                             "build it with vit_keras.ViT or vit_keras.from_pretrained.")
        config = ViTConfig.from_dict(architecture)
    return config


def config_among(layers) -> ViTConfig | None:
    """The config of the first vit_keras model (or, for a file saved by 0.1.0, patch encoder) among `layers`, e.g.
    a wrapping model's flattened layers; None if there is none."""
    for layer in layers:
        config = getattr(layer, "vit_config", None) if isinstance(layer, VisionTransformer) else None
        if config is None and layer.name == LEGACY_CONFIG_LAYER:
            architecture = getattr(layer, "architecture", None)
            config = None if architecture is None else ViTConfig.from_dict(architecture)
        if config is not None:
            return config
    return None
