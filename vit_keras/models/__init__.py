"""vit_keras's models, one module a job: `inputs` (the keras.applications-style arguments, checked and resolved),
`build` (`build_vit`, the one builder), `factory` (a checkpoint's and the caller's fields resolved into one config,
built and loaded) and `applications` (`ViT()` and the named variants)."""

from vit_keras.models.applications import (
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
    _variant_function_name,  # noqa: F401 (the docs' hooks name each variant's constructor with it)
    decode_predictions,
    imagenet_classes,
)
from vit_keras.models.build import build_vit, check_normalization
from vit_keras.models.factory import OPEN_FIELDS, build_from_checkpoint, resolve_config
from vit_keras.models.inputs import DEFAULT_SIZE, INPUT_NAME
from vit_keras.preprocessing import preprocess_input
from vit_keras.vision_transformer import config_of

__all__ = [
    "DEFAULT_SIZE", "INPUT_NAME", "OPEN_FIELDS", "ViT", "ViTB8", "ViTB16", "ViTB32", "ViTH14", "ViTL16", "ViTL32",
    "ViTR26B32", "ViTR26S32", "ViTR50B16", "ViTR50L32", "ViTRTi16", "ViTS16", "ViTS32", "ViTTi16",
    "build_from_checkpoint", "build_vit", "check_normalization", "config_of", "decode_predictions",
    "imagenet_classes", "preprocess_input", "resolve_config",
]
