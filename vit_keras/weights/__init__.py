"""Where a model's weights come from: Google `.npz`, timm `.safetensors`, Hugging Face directories, Keras
`.weights.h5`, URLs and registered names; read without pickle, mapped by name, all or nothing.

`describe(weights)` resolves a `weights=` argument before the model is built (so the model can take the source's
GELU flavour, LayerNorm epsilon and representation layer); `load_into(model, info)` fills the built model
(`vit_keras.weights.loading`). `load_weights(model, source)` does both for an existing model; `list_weights()` shows
the registered checkpoints.

Example:
    >>> from vit_keras import weights
    >>> weights.describe(None) is None
    True
"""

from vit_keras.weights import download, google, hf, hub, json_config, registry, timm, timm_eva
from vit_keras.weights.infer import infer_config_fields
from vit_keras.weights.loading import (
    KERAS_WEIGHTS_SUFFIX,
    CheckpointInfo,
    architecture_of,
    describe,
    grid_interpolation,
    hf_checkpoint_info,
    list_weights,
    load_checkpoint,
    load_into,
    load_weights,
    model_config,
    stored_grid,
)
from vit_keras.weights.resample import check_interpolation, check_source_grid

__all__ = ["KERAS_WEIGHTS_SUFFIX", "CheckpointInfo", "architecture_of", "check_interpolation", "check_source_grid",
           "describe", "download", "google", "grid_interpolation", "hf", "hf_checkpoint_info", "hub",
           "infer_config_fields", "json_config", "list_weights", "load_checkpoint", "load_into", "load_weights",
           "model_config", "registry", "stored_grid", "timm", "timm_eva"]
