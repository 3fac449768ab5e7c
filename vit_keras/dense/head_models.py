"""Segmentation and depth models: a ViT backbone's feature maps (`vit_keras.features`) with a dense head on top,
trained with `model.fit` like any Keras model."""

from __future__ import annotations

import keras
import numpy as np

from vit_keras.dense.heads import DPTHead, LinearSegmentationHead
from vit_keras.features import intermediate_model
from vit_keras.vision_transformer import config_of

HEADS = ("linear", "dpt")


def dpt_indices(num_layers: int) -> list[int]:
    """The four blocks DPT reads, evenly spaced and ending at the last (blocks 2, 5, 8, 11 of 12, as DPT-Base).

    Example:
        >>> dpt_indices(12), dpt_indices(4)
        ([2, 5, 8, 11], [0, 1, 2, 3])
    """
    if num_layers < DPTHead.LEVELS:
        raise ValueError(f"A DPT head reads {DPTHead.LEVELS} different blocks and this backbone has {num_layers}; "
                         "use head='linear', or a deeper backbone.")
    return [num_layers * (i + 1) // DPTHead.LEVELS - 1 for i in range(DPTHead.LEVELS)]


def _feature_model(backbone, indices, head, norm):
    config = config_of(backbone)
    if head not in HEADS:
        raise ValueError(f"head={head!r}: use one of {HEADS}.")
    if norm is not None and not isinstance(norm, (bool, np.bool_)):
        raise ValueError(f"norm={norm!r}: pass True, False or None (the backbone's default).")
    if indices is None:
        indices = [config.num_layers - 1] if head == "linear" else dpt_indices(config.num_layers)
    if norm is None:  # the final norm where the backbone has one over the tokens, as the DINOv2 probes read them
        norm = config.final_norm and not config.fc_norm
    features = intermediate_model(backbone, indices, norm=norm)
    if head == "dpt" and len(features.outputs) != DPTHead.LEVELS:
        raise ValueError(f"A DPT head reads {DPTHead.LEVELS} blocks; indices={indices!r} gives "
                         f"{len(features.outputs)}.")
    return features


def _dense_model(backbone, head_layer, indices, head, norm, train_backbone, name):
    features = _feature_model(backbone, indices, head, norm)
    if not isinstance(train_backbone, (bool, np.bool_)):
        raise ValueError(f"train_backbone={train_backbone!r}: pass True or False.")
    features.trainable = bool(train_backbone)
    images = keras.Input(backbone.input_shape[1:], name="images")
    maps = features(images)
    maps = maps if isinstance(maps, (list, tuple)) else [maps]
    return keras.Model(images, head_layer(list(maps), images), name=name)


def segmentation_model(backbone, num_classes: int, *, head: str = "linear", indices=None, norm=None,
                       train_backbone: bool = False, features: int = 64, name: str | None = None) -> keras.Model:
    """A segmentation model: `backbone`'s feature maps -> per-pixel logits `(B, H, W, num_classes)`.

    Args:
        backbone: a vit_keras model with a fixed image size (its head, if any, is not used).
        num_classes: the number of classes.
        head: `"linear"` (DINOv2's linear probe: BatchNorm + 1x1 convolution on the last block, upsampled) or
            `"dpt"` (four blocks fused by a DPT head).
        indices: which blocks to read (`vit_keras.features` forms); default the last block for `"linear"`,
            `dpt_indices` for `"dpt"`.
        norm: put the maps through the backbone's final norm; default: where it has one over the tokens.
        train_backbone: False (default) freezes the backbone, as the DINOv2/DINOv3 evaluations do.
        features: the DPT head's width.

    Example:
        >>> backbone = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=4, num_heads=3,
        ...                          mlp_dim=96, include_top=False)
        >>> segmentation_model(backbone, num_classes=5, head="dpt", features=16).output_shape
        (None, 32, 32, 5)
    """
    layer = LinearSegmentationHead(num_classes, name="linear_head") if head == "linear" else \
        DPTHead(num_classes, features=features, name="dpt_head")
    return _dense_model(backbone, layer, indices, head, norm, train_backbone, name or f"{backbone.name}_segmentation")


def depth_model(backbone, *, head: str = "dpt", indices=None, norm=None, train_backbone: bool = False,
                features: int = 64, name: str | None = None) -> keras.Model:
    """A monocular depth model: `backbone`'s feature maps -> non-negative depth `(B, H, W, 1)` (a DPT head with a
    ReLU output, or a linear head).

    Example:
        >>> backbone = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=4, num_heads=3,
        ...                          mlp_dim=96, include_top=False)
        >>> depth_model(backbone, features=16).output_shape
        (None, 32, 32, 1)
    """
    layer = DPTHead(1, features=features, activation="relu", name="dpt_head") if head == "dpt" else \
        LinearSegmentationHead(1, name="linear_head")
    return _dense_model(backbone, layer, indices, head, norm, train_backbone, name or f"{backbone.name}_depth")
