"""`config_of(model)`: the `ViTConfig` a built vit_keras model carries (`VisionTransformer.vit_config`, also through
`.keras` save and load; files saved by 0.1.0 keep it in their `patch_encoder` layer, which it also reads). The
functions live with the model class; this module is their public address.

Example:
    >>> import vit_keras
    >>> config_of(vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
    ...                         mlp_dim=96)).hidden_size
    48
"""

from vit_keras.model_class import config_among, config_of

__all__ = ["config_among", "config_of"]
