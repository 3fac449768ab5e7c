"""vit_keras: the Vision Transformer (Dosovitskiy et al., 2020) for Keras 3 and TensorFlow.

Example:
    >>> import vit_keras
    >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
    ...                       classes=10)
    >>> model.output_shape
    (None, 10)
"""

from vit_keras import configs, data, export, features, inspection, layers, training
from vit_keras.models import (
    ViT,
    ViTB8,
    ViTB16,
    ViTB32,
    ViTH14,
    ViTL16,
    ViTL32,
    ViTR26B32,
    ViTR26S32,
    ViTR50B16,
    ViTR50L32,
    ViTRTi16,
    ViTS16,
    ViTS32,
    ViTTi16,
    decode_predictions,
    imagenet_classes,
    preprocess_input,
)
from vit_keras.pretrained import from_pretrained
from vit_keras.weights import list_weights, load_weights
from vit_keras.weights.save import save_pretrained
from vit_keras.weights.share import push_to_hub

__version__ = "0.1.0"

# vit-keras 0.2.0's modules (`from vit_keras import vit, utils, visualize`), and the modules of the zero-shot and
# dense-prediction models (`vit_keras.zeroshot.from_pretrained(...)`), imported on first use: the zero-shot models
# need the `[zeroshot]` extra, which a classifier does not.
_MIGRATION_MODULES = ("vit", "utils", "visualize")
_LAZY_MODULES = (*_MIGRATION_MODULES, "zeroshot", "dense")


def __getattr__(name):
    if name in _LAZY_MODULES:
        import importlib

        return importlib.import_module(f"vit_keras.{name}")
    raise AttributeError(f"module 'vit_keras' has no attribute {name!r}")

__all__ = [
    "ViT",
    "ViTB8",
    "ViTB16",
    "ViTB32",
    "ViTH14",
    "ViTL16",
    "ViTL32",
    "ViTR26B32",
    "ViTR26S32",
    "ViTR50B16",
    "ViTR50L32",
    "ViTRTi16",
    "ViTS16",
    "ViTS32",
    "ViTTi16",
    "configs",
    "data",
    "decode_predictions",
    "export",
    "features",
    "from_pretrained",
    "imagenet_classes",
    "inspection",
    "layers",
    "list_weights",
    "load_weights",
    "preprocess_input",
    "push_to_hub",
    "save_pretrained",
    "training",
]
