"""Put a canonical parameter dict (vit_jax raw names) into a built vit_keras model: all of it or nothing.

The model's variables are listed under the checkpoint names they correspond to; every checkpoint array is checked
against them first (missing, unexpected, wrong shape) and only then assigned, so a failure never leaves a model
half loaded. Heads follow vit_jax `load_pretrained`: a model without a head ignores the checkpoint's `head` (and
`pre_logits` when the model has no representation layer); a head of another size starts fresh at zero, loudly.

Example:
    >>> assign_params(model, read_npz("ViT-B_16.npz"))  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Callable

import numpy as np

from vit_keras.weights.google import POS_EMBEDDING_KEY
from vit_keras.weights.resample import check_interpolation, check_source_grid, resample_position_embeddings

logger = logging.getLogger("vit_keras.weights")

_LAYER_NORMS = (("norm_1", "LayerNorm_0"), ("norm_2", "LayerNorm_2"))
_ATTENTION = (("_query_dense", "query"), ("_key_dense", "key"), ("_value_dense", "value"), ("_output_dense", "out"))


@dataclasses.dataclass
class _Slot:
    """One model variable, the checkpoint shape it expects and how a checkpoint array becomes its value."""

    variable: object
    shape: tuple
    convert: Callable[[np.ndarray], np.ndarray] = staticmethod(lambda a: a)


def _dense(slots, prefix, layer):
    slots[f"{prefix}/kernel"] = _Slot(layer.kernel, tuple(layer.kernel.shape))
    if layer.bias is not None:
        slots[f"{prefix}/bias"] = _Slot(layer.bias, tuple(layer.bias.shape))


def _norm(slots, prefix, layer):
    slots[f"{prefix}/scale"] = _Slot(layer.gamma, tuple(layer.gamma.shape))
    slots[f"{prefix}/bias"] = _Slot(layer.beta, tuple(layer.beta.shape))


def _conv(slots, prefix, layer):
    slots[f"{prefix}/kernel"] = _Slot(layer.kernel, tuple(layer.kernel.shape))


def _layer_or_none(model, name):
    try:
        return model.get_layer(name)
    except ValueError:
        return None


def model_slots(model) -> dict[str, _Slot]:
    """The model's variables keyed by their canonical (vit_jax raw) checkpoint names.

    Example:
        >>> sorted(model_slots(model))[:2]  # doctest: +SKIP
        ['Transformer/encoder_norm/bias', 'Transformer/encoder_norm/scale']
    """
    slots: dict[str, _Slot] = {}
    resnet = _layer_or_none(model, "resnet")
    if resnet is not None:
        _conv(slots, "conv_root", resnet.conv_root)
        _norm(slots, "gn_root", resnet.gn_root)
        for unit in resnet.units:
            prefix = unit.name.replace("_unit", "/unit")  # block1_unit1 -> block1/unit1
            names = ["conv1", "conv2", "conv3"] + (["conv_proj"] if unit.needs_projection else [])
            for conv in names:
                _conv(slots, f"{prefix}/{conv}", getattr(unit, conv))
                gn = conv.replace("conv", "gn")
                _norm(slots, f"{prefix}/{gn}", getattr(unit, gn))

    patches = model.get_layer("patches")
    encoder = model.get_layer("patch_encoder")
    kernel = encoder.embedding.kernel
    p = patches.patch_size
    channels = kernel.shape[0] // (p * p)
    slots["embedding/kernel"] = _Slot(
        kernel, (p, p, channels, kernel.shape[1]), lambda a, shape=tuple(kernel.shape): a.reshape(shape)
    )
    slots["embedding/bias"] = _Slot(encoder.embedding.bias, tuple(encoder.embedding.bias.shape))
    if encoder.classifier == "token":
        slots["cls"] = _Slot(encoder.cls, tuple(encoder.cls.shape))
    if encoder.position_embedding == "learned_1d":
        slots[POS_EMBEDDING_KEY] = _Slot(encoder.pos_embedding, tuple(encoder.pos_embedding.shape))
    elif encoder.position_embedding == "learned_2d":
        raise ValueError(
            "position_embedding='learned_2d' has no published checkpoint layout; build the model with "
            "position_embedding='learned_1d' to load Google, timm or Hugging Face weights."
        )

    i = 0
    while (block := _layer_or_none(model, f"Transformer_encoderblock_{i}")) is not None:
        prefix = f"Transformer/encoderblock_{i}"
        for attr, name in _LAYER_NORMS:
            _norm(slots, f"{prefix}/{name}", getattr(block, attr))
        for attr, name in _ATTENTION:
            _dense(slots, f"{prefix}/MultiHeadDotProductAttention_1/{name}", getattr(block.attention, attr))
        _dense(slots, f"{prefix}/MlpBlock_3/Dense_0", block.mlp.dense_0)
        _dense(slots, f"{prefix}/MlpBlock_3/Dense_1", block.mlp.dense_1)
        i += 1
    _norm(slots, "Transformer/encoder_norm", model.get_layer("encoder_norm"))
    for name in ("pre_logits", "head"):
        layer = _layer_or_none(model, name)
        if layer is not None:
            _dense(slots, name, layer)
    return slots


def _patch_grid(model) -> tuple[int, int]:
    return tuple(model.get_layer("patch_encoder").grid_size)


def _announce(message: str) -> None:
    logger.warning(message)
    warnings.warn(message, UserWarning, stacklevel=5)


def assign_params(
    model,
    params: dict[str, np.ndarray],
    *,
    source: str = "checkpoint",
    source_grid=None,
    interpolation: str = "linear",
) -> None:
    """Assign canonical `params` to `model`, resampling position embeddings to the model's grid.

    Raises a `ValueError` naming every missing or unexpected key and every shape mismatch (expected vs found);
    nothing is assigned then.

    Example:
        >>> assign_params(model, params, source="ViT-B_16.npz")  # doctest: +SKIP
    """
    check_interpolation(interpolation)
    source_grid = check_source_grid(source_grid)
    slots = model_slots(model)
    params = dict(params)
    notes = []

    # Heads, as vit_jax load_pretrained: no head in the model -> the checkpoint's is not used.
    for name in ("head", "pre_logits"):
        keys = [k for k in params if k.startswith(f"{name}/")]
        if keys and f"{name}/kernel" not in slots:
            for key in keys:
                params.pop(key)
            logger.info("%s: not loading %r (the model has no %s layer).", source, name, name)
    if "head/kernel" in slots:
        expected = slots["head/kernel"].shape
        found = params.get("head/kernel")
        if found is None or tuple(found.shape) != expected:
            params.pop("head/kernel", None)
            params.pop("head/bias", None)
            if found is None:
                what = f"has no classification head but the model asks for {expected[-1]} classes"
            elif found.shape[-1] != expected[-1]:
                what = f"has {found.shape[-1]} classes but the model asks for {expected[-1]}"
            else:
                what = (f"has a head on {found.shape[0]} features (after its pre_logits layer) but the model's "
                        f"head reads {expected[0]} (pass representation_size={found.shape[0]} to keep it)")
            notes.append(
                f"{source} {what}: the head starts fresh, zero-initialised (fine-tuning). Train it before use, "
                "or pass classes=<the checkpoint's> to keep its head."
            )
            params["head/kernel"] = np.zeros(expected, np.float32)
            params["head/bias"] = np.zeros(tuple(slots["head/bias"].shape), np.float32)

    if POS_EMBEDDING_KEY in params and POS_EMBEDDING_KEY in slots:
        table = params[POS_EMBEDDING_KEY]
        expected = slots[POS_EMBEDDING_KEY].shape
        grid_changed = source_grid is not None and tuple(source_grid) != _patch_grid(model)
        if table.ndim == 3 and table.shape[2] == expected[2] and (table.shape[1] != expected[1] or grid_changed):
            prefix = model.get_layer("patch_encoder").num_prefix_tokens
            try:
                params[POS_EMBEDDING_KEY] = resample_position_embeddings(
                    table, _patch_grid(model), num_prefix_tokens=prefix, source_grid=source_grid,
                    interpolation=interpolation,
                )
            except ValueError as error:
                # Reported below with the other mismatches (e.g. a class token on one side only).
                logger.info("%s: position embeddings not resampled: %s", source, error)
            else:
                logger.info("%s: position embeddings resampled from %d to %d tokens (%s).", source,
                            table.shape[1], expected[1], interpolation)

    missing = sorted(set(slots) - set(params))
    unexpected = sorted(set(params) - set(slots))
    mismatched = [
        f"{key}: model expects {slots[key].shape}, checkpoint has {tuple(params[key].shape)}"
        for key in sorted(set(slots) & set(params))
        if tuple(params[key].shape) != slots[key].shape
    ]
    if missing or unexpected or mismatched:
        lines = [f"{source} does not fit this model; nothing was loaded."]
        if missing:
            lines.append(f"Missing from the checkpoint ({len(missing)}): " + ", ".join(missing))
        if unexpected:
            lines.append(f"Not used by the model ({len(unexpected)}): " + ", ".join(unexpected))
        if mismatched:
            lines.append(f"Shape mismatches ({len(mismatched)}):\n  " + "\n  ".join(mismatched))
        lines.append(
            "Build the model with the checkpoint's architecture (patch size, hidden size, layers, heads, MLP "
            "size, classifier, representation_size, resnet)."
        )
        raise ValueError("\n".join(lines))

    for key, slot in slots.items():
        value = slot.convert(np.asarray(params[key], np.float32))
        slot.variable.assign(value.astype(slot.variable.dtype))
    for note in notes:
        _announce(note)
