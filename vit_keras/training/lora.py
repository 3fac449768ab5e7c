"""LoRA fine-tuning of a vit_keras model on Keras' own `enable_lora`: low-rank adapters beside the frozen kernels.

`lora(model, rank)` adds a trainable update `scale·A·B` (`scale = alpha / rank`, B starting at zero so the model's
function is unchanged at first) to the chosen projections of every `TransformerBlock` and freezes every other
weight except the classification head (`head`, and `head_dist` of distilled models). `save_lora` writes only the
trainable tensors (adapters and head) to a `.safetensors` file with the settings in its metadata; `load_lora` puts
them back onto the same base model with LoRA enabled the same way. `merge_lora` returns a plain model with
`scale·A·B` folded into each kernel, for export.

Keras' `EinsumDense` factorises its kernel `(*in, out)` as A `(*in, rank)` and B `(rank, out)`: for the query,
key and value projections `(width, heads, head_dim)` the rank is bounded by `head_dim`, for the attention output
`(heads, head_dim, width)` by `width`, for a `Dense` `(in, out)` by `min(in, out)`.

Example:
    >>> model = lora(tiny_model, rank=2)
    >>> sorted({v.path.rsplit("/", 1)[-1] for v in model.trainable_weights})
    ['bias', 'kernel', 'lora_kernel_a', 'lora_kernel_b']
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np

TARGETS = {
    "qv": ("query", "value"),
    "attention": ("query", "key", "value", "attention_output"),
    "attention+mlp": ("query", "key", "value", "attention_output", "mlp"),
}
HEAD_NAMES = ("head", "head_dist")
_ATTENTION_DENSES = {"query": "_query_dense", "key": "_key_dense", "value": "_value_dense",
                     "attention_output": "_output_dense"}
FORMAT = "vit_keras.lora"


def _blocks(model):
    from vit_keras.layers.transformer import TransformerBlock

    return [layer for layer in model._flatten_layers(include_self=False) if isinstance(layer, TransformerBlock)]


def _sublayers(layer):
    return list(layer._flatten_layers(include_self=False))


def _mlp_denses(block):
    import keras

    from vit_keras.layers.swiglu import SwiGLUBlock
    from vit_keras.layers.transformer import MlpBlock

    mlps = [layer for layer in _sublayers(block) if isinstance(layer, (MlpBlock, SwiGLUBlock))]
    return [layer for mlp in mlps for layer in _sublayers(mlp) if isinstance(layer, keras.layers.Dense)]


def _attention_denses(block, names):
    import keras

    attentions = [layer for layer in _sublayers(block) if isinstance(layer, keras.layers.MultiHeadAttention)]
    if not attentions:
        raise ValueError(f"{block.path}: no MultiHeadAttention layer to put LoRA adapters on.")
    return [getattr(attentions[0], _ATTENTION_DENSES[name]) for name in names]


def target_layers(model, targets: str = "qv") -> list:
    """The `Dense`/`EinsumDense` layers that `targets` names in every `TransformerBlock` of `model`.

    Example:
        >>> [layer.name for layer in target_layers(tiny_model, "qv")][:2]
        ['query', 'value']
    """
    if targets not in TARGETS:
        raise ValueError(f"LoRA targets must be one of {sorted(TARGETS)}, got {targets!r} (`targets=` / "
                         "--lora-targets).")
    blocks = _blocks(model)
    if not blocks:
        raise ValueError(f"{getattr(model, 'name', model)!r} has no vit_keras TransformerBlock: LoRA here adapts "
                         "vit_keras models (vit_keras.ViT, vit_keras.vit_b16, ...), build the model with vit_keras.")
    names = TARGETS[targets]
    layers = []
    for block in blocks:
        layers += _attention_denses(block, [name for name in names if name != "mlp"])
        if "mlp" in names:
            layers += _mlp_denses(block)
    return layers


def _factor_dims(layer) -> tuple[int, int]:
    """(input side, output side) of Keras' LoRA factorisation of `layer.kernel`: A is `(*in, rank)`, B `(rank, out)`."""
    shape = tuple(int(d) for d in layer.kernel.shape)
    return math.prod(shape[:-1]), shape[-1]


def _adapted(model) -> list:
    return [layer for layer in model._flatten_layers(include_self=False) if getattr(layer, "lora_enabled", False)]


def head_layers(model) -> list:
    """The classification head(s) that train beside the adapters: top-level `Dense` layers named `head`/`head_dist`.

    Example:
        >>> [layer.name for layer in head_layers(tiny_model)]
        ['head']
    """
    import keras

    return [layer for layer in model.layers if isinstance(layer, keras.layers.Dense) and layer.name in HEAD_NAMES]


def lora(model, rank: int = 8, targets: str = "qv", alpha: float | None = None):
    """Enable LoRA adapters of `rank` on `targets` of every block of `model` (in place; returns `model`).

    `targets`: `"qv"` (query and value, the LoRA paper's default), `"attention"` (query, key, value, output) or
    `"attention+mlp"` (also the MLP's Dense layers, SwiGLU's included). `alpha` (default: `rank`) sets the scale
    `alpha / rank` of the update. Afterwards only the adapters and the head are trainable. Compile the model
    after this call.

    Example:
        >>> model = lora(tiny_model, rank=4, targets="attention")
        >>> len([layer for layer in target_layers(model, "attention") if layer.lora_enabled])
        8
    """
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
        raise ValueError(f"LoRA rank must be a positive integer, got {rank!r} (`rank=` / --lora).")
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating))
                              or not math.isfinite(alpha) or not alpha > 0):
        raise ValueError(f"LoRA alpha must be a finite positive number (or None for alpha = rank), got {alpha!r}.")
    layers = target_layers(model, targets)
    if _adapted(model):
        raise ValueError(f"LoRA is already enabled on {getattr(model, 'name', 'this model')!r} "
                         f"({_adapted(model)[0].path}); enable it once, on a model built without adapters.")
    for layer in layers:
        fan_in, fan_out = _factor_dims(layer)
        if rank > min(fan_in, fan_out):
            most = min(fan_in, fan_out)
            raise ValueError(f"LoRA rank {rank} is larger than {layer.path}'s kernel "
                             f"{tuple(layer.kernel.shape)} allows; pass a rank of at most {most}.")
    for variable in model.weights:
        variable.trainable = False
    for layer in layers:
        layer.enable_lora(int(rank), lora_alpha=alpha, a_initializer="he_uniform", b_initializer="zeros")
    for layer in head_layers(model):
        for variable in layer.weights:
            variable.trainable = True
    return model


def lora_settings(model) -> dict | None:
    """`{"rank", "targets", "alpha"}` of a model's adapters, read from its layers; None without adapters.

    Example:
        >>> lora_settings(lora(tiny_model, rank=2, alpha=4))
        {'rank': 2, 'targets': 'qv', 'alpha': 4.0}
    """
    adapted = _adapted(model)
    if not adapted:
        return None
    for name in TARGETS:
        try:
            if {id(layer) for layer in target_layers(model, name)} == {id(layer) for layer in adapted}:
                return {"rank": int(adapted[0].lora_rank), "targets": name, "alpha": float(adapted[0].lora_alpha)}
        except ValueError:
            break
    raise ValueError(f"{model.name!r} has LoRA adapters that no `targets` setting describes (on "
                     f"{[layer.path for layer in adapted][:4]}...); enable them with vit_keras.training.lora.")


def restart_adapters(model) -> int:
    """Give a fresh A to every adapter whose A and B are both zero; return how many.

    Keras saves a LoRA layer's weights (`save_weights`, `.keras`) with `scale·A·B` folded into the kernel and
    zeroes both factors when it loads them: the model computes the same function, but with A = B = 0 the adapters'
    gradients are zero. A fresh A (B stays zero) keeps the function and lets training go on, as after a resume.

    Example:
        >>> model = lora(tiny_model, rank=2)
        >>> restart_adapters(model)  # freshly enabled: A is random
        0
    """
    import keras

    restarted = 0
    for layer in _adapted(model):
        a, b = (np.asarray(keras.ops.convert_to_numpy(v)) for v in (layer.lora_kernel_a, layer.lora_kernel_b))
        if not a.any() and not b.any():
            init = keras.initializers.HeUniform()
            layer.lora_kernel_a.assign(init(layer.lora_kernel_a.shape, dtype=layer.lora_kernel_a.dtype))
            restarted += 1
    return restarted


def trainable_tensors(model) -> dict:
    """`{variable path: array}` of the trainable variables (adapters and head) of a LoRA model."""
    import keras

    return {v.path: np.ascontiguousarray(keras.ops.convert_to_numpy(v)) for v in model.trainable_weights}


def base_fingerprint(model) -> str:
    """A SHA-256 of the frozen weights (everything but the adapters and the head), in the model's weight order:
    adapters trained on one base mean nothing on another of the same architecture.

    Example:
        >>> len(base_fingerprint(lora(tiny_model, rank=2)))
        64
    """
    import hashlib

    import keras

    digest = hashlib.sha256()
    for variable in model.weights:
        if variable.trainable:
            continue
        value = np.ascontiguousarray(keras.ops.convert_to_numpy(variable))
        digest.update(f"{value.dtype.str}{value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def _require_lora(model, what: str) -> dict:
    settings = lora_settings(model)
    if settings is None:
        raise ValueError(f"{what}: {getattr(model, 'name', model)!r} has no LoRA adapters; call "
                         "vit_keras.training.lora(model, rank=...) first.")
    return settings


def save_lora(model, path, overwrite: bool = True) -> str:
    """Write the adapters and the head of `model` (nothing else) to the `.safetensors` file `path`, atomically,
    with rank, targets, alpha and the base weights' fingerprint (`base_fingerprint`) in its metadata. Returns `path`.

    Example:
        >>> model = lora(tiny_model, rank=2)
        >>> path = save_lora(model, "adapters.safetensors")
        >>> sorted(read_metadata(path))
        ['alpha', 'base_fingerprint', 'format', 'rank', 'targets']
    """
    from safetensors.numpy import save_file

    from vit_keras.files import atomic_file

    path = os.fspath(path)
    if not path.endswith(".safetensors"):
        raise ValueError(f"{path!r}: LoRA adapters are saved as .safetensors; name the file *.safetensors.")
    settings = _require_lora(model, "save_lora")
    metadata = {"format": FORMAT, **{key: str(value) for key, value in settings.items()},
                "base_fingerprint": base_fingerprint(model)}
    with atomic_file(path, overwrite=overwrite) as tmp:
        save_file(trainable_tensors(model), tmp, metadata=metadata)
    return path


def read_metadata(path) -> dict:
    """The metadata of a LoRA `.safetensors` file (`format`, `rank`, `targets`, `alpha`, `base_fingerprint`)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(os.fspath(path), framework="np") as handle:
            return dict(handle.metadata() or {})
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{os.fspath(path)!r} is not a readable safetensors file ({error}).") from error


def load_lora(model, path, *, check_base: bool = True):
    """Load adapters saved by `save_lora` onto `model` (a base model with LoRA enabled the same way), refusing a
    different rank, targets or alpha, a missing or extra tensor, or a shape mismatch, naming it. Returns `model`.

    `check_base=True` also refuses a base whose frozen weights are not those the adapters were trained on (the
    fingerprint `save_lora` recorded; files written without one are not checked): the same architecture with
    other weights gives other outputs. `check_base=False` loads them anyway, on purpose.

    Example:
        >>> path = save_lora(lora(tiny_model, rank=2), "saved.safetensors")
        >>> base = lora(vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                           mlp_dim=96, classes=10), rank=2)  # built afresh: other random weights
        >>> load_lora(base, path)
        Traceback (most recent call last):
        ValueError: ...trained on other base weights than ...
        >>> load_lora(base, path, check_base=False) is base
        True
    """
    from vit_keras.weights.safetensors_io import read_safetensors, refuse_pickle

    path = os.fspath(path)
    refuse_pickle(path)
    metadata = read_metadata(path)
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{path!r} is not a vit_keras LoRA file (metadata format {metadata.get('format')!r}); "
                         "write it with vit_keras.training.save_lora.")
    settings = _require_lora(model, "load_lora")
    for key, value in settings.items():
        if metadata.get(key) != str(value):
            raise ValueError(f"{path!r} holds LoRA adapters with {key}={metadata.get(key)}, the model has "
                             f"{key}={value}; enable LoRA on the base model with the file's {key}.")
    if not isinstance(check_base, bool):
        raise ValueError(f"check_base={check_base!r}: pass True or False.")
    recorded = metadata.get("base_fingerprint")
    if check_base and recorded is not None and recorded != base_fingerprint(model):
        raise ValueError(f"{path!r} holds LoRA adapters trained on other base weights than {model.name!r} has (the "
                         "frozen weights' fingerprint differs): the outputs would not be the trained model's. Load "
                         "them onto the base they were trained from (the same checkpoint, image size and "
                         "pretrained weights), or pass check_base=False to load them anyway.")
    tensors = read_safetensors(path)
    variables = {v.path: v for v in model.trainable_weights}
    missing, extra = sorted(set(variables) - set(tensors)), sorted(set(tensors) - set(variables))
    if missing or extra:
        raise ValueError(f"{path!r} does not match the model: missing tensors {missing[:5]}, extra tensors "
                         f"{extra[:5]}; load it onto a base model built the same way (architecture, classes).")
    for key, variable in variables.items():
        if tuple(tensors[key].shape) != tuple(variable.shape):
            raise ValueError(f"{path!r}: tensor {key!r} has shape {tuple(tensors[key].shape)}, the model's is "
                             f"{tuple(variable.shape)}; load it onto a base model built the same way.")
    for key, variable in variables.items():
        variable.assign(tensors[key])
    return model


def merge_lora(model):
    """A new plain model (no adapters, every weight trainable) computing what `model` computes, with
    `kernel + (alpha / rank)·A·B` as each adapted layer's kernel: for export (SavedModel, TFLite, ONNX).

    Keras has no way to disable LoRA on a layer; its weight saving folds the update into the kernel
    (`Dense`/`EinsumDense` `save_own_variables`), so the merged weights go through `save_weights` into a fresh
    copy of the model built from its config, which has no adapters. Outputs differ from the unmerged model's by
    float32 rounding only: x·(W + ΔW) is summed in another order than x·W + (x·A)·B·scale.

    Example:
        >>> merged = merge_lora(lora(tiny_model, rank=2))
        >>> any(getattr(layer, "lora_enabled", False) for layer in merged._flatten_layers())
        False
    """
    import keras

    _require_lora(model, "merge_lora")
    fresh = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
    with tempfile.TemporaryDirectory() as directory:
        weights = os.path.join(directory, "merged.weights.h5")
        model.save_weights(weights)
        fresh.load_weights(weights)
    return fresh
