"""The demo's model: a narrow ViT for the 8x8 digits, and the two resolutions it is trained at.

Example:
    >>> PRETRAIN_SIZE // PATCH_SIZE, FINETUNE_SIZE // PATCH_SIZE  # the patch grids of the two stages
    (4, 6)
"""

from __future__ import annotations

PRETRAIN_SIZE, FINETUNE_SIZE, PATCH_SIZE = 8, 12, 2


def build_demo_model(image_size: int = PRETRAIN_SIZE, patch_size: int = PATCH_SIZE, num_layers: int = 3,
                     classes: int = 10, dropout_rate: float = 0.0, name: str = "vit-digits"):
    """A narrow ViT for 8x8 digits: 2x2 patches, hidden 96, 3 heads, MLP 192, 3 layers, logits out.

    Example:
        >>> build_demo_model(16).output_shape
        (None, 10)
    """
    from vit_keras.models import ViT

    return ViT(image_size=image_size, patch_size=patch_size, hidden_size=96, num_layers=num_layers, num_heads=3,
               mlp_dim=192, classes=classes, dropout_rate=dropout_rate, classifier_activation=None, name=name)
