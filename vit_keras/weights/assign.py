"""Put a canonical parameter dict (vit_jax raw names) into a built vit_keras model: all of it or nothing.

The model's variables are listed under the checkpoint names they correspond to; every checkpoint array is checked
against them first (missing, unexpected, wrong shape) and only then assigned, so a failure never leaves a model
half loaded. Heads follow vit_jax `load_pretrained`: a model without a head ignores the checkpoint's `head` (and
`pre_logits` when the model has no representation layer); a head of another size starts fresh at zero, loudly.

Example:
    >>> import vit_keras
    >>> from vit_keras.weights.google import read_npz
    >>> model = vit_keras.ViT(image_size=64, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
    ...                       classes=7)
    >>> assign_params(model, read_npz("tests/fixtures/vitjax_token_raw/checkpoint.npz"))
"""

from __future__ import annotations

import logging
import re
import warnings

import keras
import numpy as np

from vit_keras.layers.checkpoint import CheckpointVariable, checkpoint_variables
from vit_keras.weights.google import POS_EMBEDDING_KEY
from vit_keras.weights.resample import check_interpolation, check_source_grid, resample_position_embeddings

logger = logging.getLogger("vit_keras.weights")


def checkpoint_prefix(layer_name: str) -> str:
    """The checkpoint name of a top-level layer: vit_jax's, where the Keras name could not use a slash.

    Example:
        >>> checkpoint_prefix("Transformer_encoderblock_3")
        'Transformer/encoderblock_3'
    """
    if layer_name == "encoder_norm":
        return "Transformer/encoder_norm"
    return layer_name.replace("Transformer_encoderblock_", "Transformer/encoderblock_")


# Layers whose variables sit at the root of the checkpoint's names (their own names are not part of them).
_ROOT_LAYERS = ("patch_encoder", "resnet")


def model_slots(model) -> dict[str, CheckpointVariable]:
    """The model's variables keyed by their canonical (vit_jax raw) checkpoint names, as each layer declares them.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> sorted(model_slots(model))[:2]
        ['Transformer/encoder_norm/bias', 'Transformer/encoder_norm/scale']
    """
    slots: dict[str, CheckpointVariable] = {}
    for layer in model.layers:
        if not layer.weights or isinstance(layer, keras.Model):
            continue
        names = checkpoint_variables(layer)
        prefix = "" if layer.name in _ROOT_LAYERS else checkpoint_prefix(layer.name) + "/"
        for name, slot in names.items():
            key = prefix + name
            if key in slots:
                raise ValueError(f"Two layers claim the checkpoint name {key!r}.")
            slots[key] = slot
    return slots


def _encoder(model):
    return model.get_layer("patch_encoder")


def _patch_grid(model) -> tuple[int, int]:
    return tuple(_encoder(model).grid_size)


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
    antialias: bool = False,
) -> None:
    """Assign canonical `params` to `model`, resampling position embeddings to the model's grid.

    Raises a `ValueError` naming every missing or unexpected key and every shape mismatch (expected vs found);
    nothing is assigned then.

    Example:
        >>> import vit_keras
        >>> from vit_keras.weights.google import read_npz
        >>> params = read_npz("tests/fixtures/vitjax_token_raw/checkpoint.npz")  # a 64x64 model's 8x8 grid
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=7)  # a 4x4 grid: the table is resampled
        >>> assign_params(model, params, source="checkpoint.npz")
    """
    check_interpolation(interpolation)
    source_grid = check_source_grid(source_grid)
    slots = model_slots(model)
    # What each canonical array was read from (a reader's `rules.CanonicalParams`), for the mismatch messages.
    origins = {key: f"{origin} in {params.source}" for key, origin in getattr(params, "origins", {}).items()}
    params = dict(params)
    notes = []

    # Heads, as vit_jax load_pretrained: no head in the model -> the checkpoint's is not used.
    # The attention-pooling head and fc_norm come after the tokens: a model without a head that returns the tokens
    # (or pools otherwise) does not use them; a model with a head must (a mismatch is reported below).
    has_head = "head/kernel" in slots
    droppable = ["head", "head_dist", "pre_logits"]
    droppable += [] if has_head else ["MAPHead_0"]
    droppable += [] if has_head or "Transformer/encoder_norm/scale" in slots else ["fc_norm"]
    for name in droppable:
        keys = [k for k in params if k.startswith(f"{name}/")]
        if keys and not any(k.startswith(f"{name}/") for k in slots):
            for key in keys:
                params.pop(key)
            logger.info("%s: not loading %r (the model has no %s layer).", source, name, name)
    for head in ("head", "head_dist"):
        if f"{head}/kernel" in slots:
            _fit_head(head, slots, params, notes, source)

    if POS_EMBEDDING_KEY in params and POS_EMBEDDING_KEY in slots:
        table = params[POS_EMBEDDING_KEY]
        expected = slots[POS_EMBEDDING_KEY].shape
        grid_changed = source_grid is not None and tuple(source_grid) != _patch_grid(model)
        if table.ndim == 3 and table.shape[2] == expected[2] and (table.shape[1] != expected[1] or grid_changed):
            prefix = _encoder(model).num_embedded_prefix_tokens
            try:
                params[POS_EMBEDDING_KEY] = resample_position_embeddings(
                    table, _patch_grid(model), num_prefix_tokens=prefix, source_grid=source_grid,
                    interpolation=interpolation, antialias=antialias,
                )
            except ValueError as error:
                # Reported below with the other mismatches (e.g. a class token on one side only).
                logger.info("%s: position embeddings not resampled: %s", source, error)
            else:
                logger.info("%s: position embeddings resampled from %d to %d tokens (%s).", source,
                            table.shape[1], expected[1], interpolation)
    _check_and_assign(slots, params, source, origins)
    for note in notes:
        _announce(note)


def _fit_head(head, slots, params, notes, source):
    """A head of another size than the model's starts fresh at zero, as vit_jax `load_pretrained` does."""
    expected = slots[f"{head}/kernel"].shape
    found = params.get(f"{head}/kernel")
    if found is not None and tuple(found.shape) == expected:
        return
    params.pop(f"{head}/kernel", None)
    params.pop(f"{head}/bias", None)
    if found is None:
        what = f"has no classification head but the model asks for {expected[-1]} classes"
    elif found.shape[-1] != expected[-1]:
        what = f"has {found.shape[-1]} classes but the model asks for {expected[-1]}"
    else:
        what = (f"has a head on {found.shape[0]} features (after its pre_logits layer) but the model's "
                f"head reads {expected[0]} (pass representation_size={found.shape[0]} to keep it)")
    if head == "head":
        notes.append(
            f"{source} {what}: the head starts fresh, zero-initialised (fine-tuning). Train it before use, "
            "or pass classes=<the checkpoint's> to keep its head."
        )
    params[f"{head}/kernel"] = np.zeros(expected, np.float32)
    params[f"{head}/bias"] = np.zeros(tuple(slots[f"{head}/bias"].shape), np.float32)


# The switches that decide whether a projection has a bias, by the canonical names of those biases.
_BIAS_SWITCHES = (
    ("qkv_bias", "q/k/v projections",
     re.compile(r"^Transformer/encoderblock_\d+/MultiHeadDotProductAttention_1/(query|key|value)/bias$")),
    ("patch_bias", "patch projection", re.compile(r"^embedding/bias$")),
)


def _bias_switch_hints(missing, unexpected) -> list[str]:
    """A hint naming the switch when the biases the model and the checkpoint disagree on are exactly a switch's."""
    hints = []
    for switch, what, pattern in _BIAS_SWITCHES:
        if any(pattern.match(key) for key in missing):
            hints.append(f"The checkpoint's {what} have no bias: build the model with {switch}=False.")
        elif any(pattern.match(key) for key in unexpected):
            hints.append(f"The checkpoint's {what} have a bias: build the model with {switch}=True.")
    return hints


# What a mismatch of a vision model asks the caller to do.
_VISION_FIX = ("Build the model with the checkpoint's architecture (patch size, hidden size, layers, heads, MLP size, "
               "classifier, representation_size, resnet and the family switches), or let vit_keras.from_pretrained "
               "read it off the checkpoint.")


def assign_slots(slots: dict[str, CheckpointVariable], params, *, source: str = "checkpoint",
                 fix: str = _VISION_FIX) -> None:
    """Put every canonical array of `params` in its slot (`{canonical name: CheckpointVariable}`, e.g. a text
    tower's or the heads'), all or nothing: a `ValueError` names every missing or unexpected name and every shape
    mismatch, and ends with `fix`, before anything is assigned.

    Example:
        >>> from vit_keras.layers.checkpoint import plain
        >>> scale = keras.Variable(0.0)
        >>> assign_slots({"logit_scale": plain(scale)}, {"logit_scale": np.float32(2.3)})
        >>> round(float(scale.numpy()), 2)
        2.3
    """
    origins = {key: f"{origin} in {params.source}" for key, origin in getattr(params, "origins", {}).items()}
    _check_and_assign(slots, dict(params), source, origins, fix)


def _check_and_assign(slots, params, source, origins=None, fix=_VISION_FIX):
    origins = origins or {}
    missing = sorted(set(slots) - set(params))
    unexpected = sorted(set(params) - set(slots))
    mismatched = [
        f"{key}{f' (read from {origins[key]})' if key in origins else ''}: model expects {slots[key].shape}, "
        f"checkpoint has {tuple(params[key].shape)}"
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
        lines.extend(_bias_switch_hints(missing, unexpected))
        lines.append(fix)
        raise ValueError("\n".join(lines))

    for key, slot in slots.items():
        value = slot.convert(np.asarray(params[key], np.float32))
        slot.variable.assign(value.astype(slot.variable.dtype))
