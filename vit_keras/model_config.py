"""Read the `ViTConfig` back off a built vit_keras model.

Every model `vit_keras.models.build_vit` makes stores its config in its `patch_encoder` layer (also through `.keras`
save and load). This module sits below both `models` and `weights`, which read it, and imports only `configs`.

Example:
    >>> import vit_keras
    >>> config_of(vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
    ...                         mlp_dim=96)).hidden_size
    48
"""

from __future__ import annotations

from vit_keras.configs import ViTConfig

CONFIG_LAYER = "patch_encoder"


def config_of(model) -> ViTConfig:
    """The `ViTConfig` a vit_keras model was built from (also after `.keras` save and load).

    Example:
        >>> import vit_keras
        >>> config_of(vit_keras.ViTTi16(image_size=32)).hidden_size
        192
    """
    try:
        architecture = model.get_layer(CONFIG_LAYER).architecture
    except (ValueError, AttributeError) as error:
        raise ValueError(f"{getattr(model, 'name', model)!r} is not a vit_keras model (no {CONFIG_LAYER!r} layer "
                         "carrying a config); build it with vit_keras.ViT or vit_keras.from_pretrained.") from error
    if architecture is None:
        raise ValueError(f"{model.name!r} does not carry its architecture; build it with vit_keras.ViT.")
    return ViTConfig.from_dict(architecture)
