"""Read a transformers image-text directory (`CLIPModel`, `SiglipModel`, `Siglip2Model`: `config.json` with
`text_config` and `vision_config`, `model.safetensors` or a sharded index) into the text tower's architecture and
arrays, and the vision tower's own checkpoint.

The text side is a table of rules (source module template → canonical name → transform), as the vision readers:
the canonical names are the text model's checkpoint names (`vit_keras.zeroshot.text.text_slots`). The vision
tower's tensors (`vision_model.*`) are handed whole to `vit_keras.from_pretrained` as the vision tower's
directory (`vit_keras.zeroshot.vision`); a tensor neither side knows is refused by name.

Example:
    >>> checkpoint = read_checkpoint("tests/fixtures/zeroshot/clip/checkpoint")
    >>> checkpoint.family_name, checkpoint.text_config.pooling, checkpoint.text_config.context_length
    ('clip', 'first_eos', 16)
    >>> sorted(checkpoint.text_params)[:2]
    ['final_layer_norm/bias', 'final_layer_norm/scale']
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable

import numpy as np

from vit_keras.weights import hub
from vit_keras.weights.safetensors_io import read_safetensors
from vit_keras.zeroshot import open_clip, transforms
from vit_keras.zeroshot.families import FAMILIES, Family
from vit_keras.zeroshot.text_config import TextConfig
from vit_keras.zeroshot.tokenizer import returns_attention_mask

CONFIG_NAME = "config.json"
PREPROCESSOR_NAME = "preprocessor_config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
VISION_PREFIX = "vision_model."
# transformers' hidden_act → the block's activation (its "gelu" is exact erf; the tanh forms are approximations).
HIDDEN_ACTS = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_fast": "gelu_tanh", "quick_gelu": "quick_gelu"}
# transformers' CLIP rule: configs that say eos_token_id 2 (the first released ones) pool at the largest token id.
LEGACY_CLIP_EOS = 2


@dataclasses.dataclass(frozen=True)
class Rule:
    """`source` (a module, `{i}` = block index) read with `transform` gives `target` (same placeholder) arrays.
    `weight`/`bias`: the module's parameter names (`weight=""`: the source is the tensor's own key; `bias=None`: no
    bias). `families`: the families whose checkpoints have it (all when empty)."""

    source: str
    target: str
    transform: Callable
    weight: str = "weight"
    bias: str | None = "bias"
    families: tuple = ()


def _block(source: str, target: str, transform, **kw) -> Rule:
    return Rule(f"text_model.encoder.layers.{{i}}.{source}", f"text_block_{{i}}/{target}", transform, **kw)


TEXT_RULES = (
    Rule("text_model.embeddings.token_embedding", "text_embedding/token_embedding", transforms.table, bias=None),
    Rule("text_model.embeddings.position_embedding", "text_embedding/position_embedding", transforms.table,
         bias=None),
    _block("layer_norm1", "LayerNorm_0", transforms.norm),
    _block("self_attn.q_proj", "MultiHeadDotProductAttention_1/query", transforms.heads_in),
    _block("self_attn.k_proj", "MultiHeadDotProductAttention_1/key", transforms.heads_in),
    _block("self_attn.v_proj", "MultiHeadDotProductAttention_1/value", transforms.heads_in),
    _block("self_attn.out_proj", "MultiHeadDotProductAttention_1/out", transforms.heads_out),
    _block("layer_norm2", "LayerNorm_2", transforms.norm),
    _block("mlp.fc1", "MlpBlock_3/Dense_0", transforms.linear),
    _block("mlp.fc2", "MlpBlock_3/Dense_1", transforms.linear),
    Rule("text_model.final_layer_norm", "final_layer_norm", transforms.norm),
    Rule("text_projection", "text_projection", transforms.linear, bias=None, families=("clip",)),
    Rule("text_model.head", "text_projection", transforms.linear, families=("siglip", "siglip2")),
)
# What joins the towers: CLIP's Linear after the vision pooler, the logit scale (used as exp) and SigLIP's bias.
HEAD_RULES = (
    Rule("visual_projection", "visual_projection", transforms.linear, bias=None, families=("clip",)),
    Rule("logit_scale", "logit_scale", transforms.table, weight="", bias=None),
    Rule("logit_bias", "logit_bias", transforms.table, weight="", bias=None, families=("siglip", "siglip2")),
)


@dataclasses.dataclass
class Checkpoint:
    """A read image-text checkpoint: its family, the text tower's config and arrays (canonical names), the
    heads' arrays, the vision tower's config.json and tensors, and where it came from."""

    path: str
    family_name: str
    family: Family
    config: dict
    text_config: TextConfig
    text_params: dict
    head_params: dict
    vision_config: dict
    vision_tensors: dict
    preprocessor: dict | None = None  # the image processor's config (its normalisation), when the checkpoint has one


def _require(config: dict, key: str, kind, file: str, default=None):
    value = config.get(key, default)
    if value is None or not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ValueError(f"{file!r}: `{key}` must be a {getattr(kind, '__name__', kind)}, got {value!r}; "
                         "re-save the model with transformers' save_pretrained.")
    return value


def read_config(path: str) -> tuple[str, dict]:
    """The family (`clip`, `siglip`, `siglip2`) and `config.json` of an image-text directory.

    Example:
        >>> read_config("tests/fixtures/zeroshot/siglip2/checkpoint")[0]
        'siglip2'
    """
    file = os.path.join(path, CONFIG_NAME)
    if not os.path.isfile(file):
        raise ValueError(f"{path!r} has no {CONFIG_NAME}: pass a transformers save_pretrained directory of a "
                         f"{', '.join(f.model_class for f in FAMILIES.values())} (or its hub id).")
    with open(file, encoding="utf-8") as f:
        config = json.load(f)
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in FAMILIES:
        vision_types = {family.vision_model_type: name for name, family in FAMILIES.items()}
        hint = (" It is a vision tower alone: load it with vit_keras.from_pretrained; zero-shot needs the whole "
                f"{FAMILIES[vision_types[model_type]].model_class}." if model_type in vision_types else "")
        raise ValueError(f"{file!r}: model_type {model_type!r} is not an image-text model vit_keras.zeroshot reads "
                         f"({sorted(FAMILIES)}).{hint}")
    for key in ("text_config", "vision_config"):
        if not isinstance(config.get(key), dict):
            raise ValueError(f"{file!r}: a {model_type} config needs `{key}` (a dict); re-save the model with "
                             "save_pretrained.")
    return model_type, config


def text_config(family_name: str, config: dict, file: str, use_attention_mask: bool = True) -> TextConfig:
    """The `TextConfig` of a `text_config` (the family decides the causal mask, pooling and projection;
    `use_attention_mask`: whether the tokenizer gives the padding mask the model then reads).

    Example:
        >>> config = read_config("tests/fixtures/zeroshot/clip/checkpoint")[1]
        >>> text_config("clip", config, "config.json").eos_token_id
        633
    """
    family = FAMILIES[family_name]
    text = config["text_config"]
    act = _require(text, "hidden_act", str, file, default="gelu")
    if act not in HIDDEN_ACTS:
        raise ValueError(f"{file!r}: text_config.hidden_act {act!r} is not a GELU vit_keras implements "
                         f"({sorted(HIDDEN_ACTS)}).")
    hidden = _require(text, "hidden_size", int, file)
    pooling, eos = family.text_pooling, text.get("eos_token_id")
    if pooling == "first_eos":
        eos = _require(text, "eos_token_id", int, file)
        if eos == LEGACY_CLIP_EOS:
            pooling = "argmax"
    projection = (_require(config, "projection_dim", int, file) if family.text_projection == "text_projection"
                  else _require(text, "projection_size", int, file, default=hidden))
    return TextConfig(
        vocab_size=_require(text, "vocab_size", int, file), context_length=_require(text, "max_position_embeddings",
                                                                                    int, file),
        hidden_size=hidden, num_layers=_require(text, "num_hidden_layers", int, file),
        num_heads=_require(text, "num_attention_heads", int, file),
        mlp_dim=_require(text, "intermediate_size", int, file), activation=HIDDEN_ACTS[act],
        layer_norm_epsilon=float(_require(text, "layer_norm_eps", (int, float), file, default=1e-5)),
        causal=family.causal, use_attention_mask=use_attention_mask, pooling=pooling,
        eos_token_id=None if eos is None else int(eos), projection_dim=projection,
        projection_bias=family.text_projection_bias)


def read_tensors(path: str) -> dict:
    """Every tensor of `model.safetensors` (or the sharded index's shards) in `path`, as NumPy arrays."""
    if os.path.isfile(os.path.join(path, WEIGHTS_NAME)):
        return dict(read_safetensors(os.path.join(path, WEIGHTS_NAME)))
    if os.path.isfile(os.path.join(path, INDEX_NAME)):
        return dict(hub.read_shards(path))
    names = sorted(os.listdir(path))
    pickles = [name for name in names if name.endswith((".bin", ".pt", ".pth", ".ckpt"))]
    why = (f" Its weights are pickle files ({', '.join(pickles)}), which vit_keras never loads; convert them with "
           "transformers (save_pretrained(..., safe_serialization=True))." if pickles else "")
    raise ValueError(f"{path!r} has no {WEIGHTS_NAME} (nor {INDEX_NAME}); its files are {names}.{why}")


def apply_rules(rules, tensors: dict, *, family_name: str, num_layers: int, num_heads: int, file: str,
                used: set) -> dict:
    """The canonical arrays the `rules` of `family_name` give from `tensors`; every rule's tensors must be there
    (a missing one is refused by its key), and the keys read are added to `used`.

    Example:
        >>> apply_rules(HEAD_RULES, {"logit_scale": np.array([2.0], "float32")},  # doctest: +ELLIPSIS
        ...             family_name="siglip", num_layers=0, num_heads=1, file="f", used=set())
        Traceback (most recent call last):
        ...
        ValueError: 'f' lacks 'logit_bias' (the siglip model's logit_bias); nothing was loaded. Check ...
    """
    out = {}
    for rule in rules:
        if rule.families and family_name not in rule.families:
            continue
        indices = range(num_layers) if "{i}" in rule.source else (None,)
        for index in indices:
            module = rule.source.replace("{i}", str(index))
            target = rule.target.replace("{i}", str(index))
            weight_key = f"{module}.{rule.weight}" if rule.weight else module
            bias_key = None if rule.bias is None else f"{module}.{rule.bias}"
            for key in (weight_key, bias_key):
                if key is not None and key not in tensors:
                    raise ValueError(f"{file!r} lacks {key!r} (the {family_name} model's {target}); nothing was "
                                     "loaded. Check that the file and its config.json describe the same model.")
            weight = np.asarray(tensors[weight_key], np.float32)
            bias = None if bias_key is None else np.asarray(tensors[bias_key], np.float32)
            used.update(key for key in (weight_key, bias_key) if key is not None)
            for suffix, array in rule.transform(weight, bias, num_heads).items():
                out[f"{target}/{suffix}" if suffix else target] = array
    return out


def _read_preprocessor(path: str) -> dict | None:
    file = os.path.join(path, PREPROCESSOR_NAME)
    if not os.path.isfile(file):
        return None
    with open(file, encoding="utf-8") as f:
        return json.load(f)


def read_checkpoint(path: str) -> Checkpoint:
    """Read an image-text directory (transformers, or open_clip's layout of CLIP: `vit_keras.zeroshot.open_clip`):
    refuses what it cannot run, naming the file and the key."""
    path = os.fspath(path)
    if open_clip.is_open_clip_dir(path):
        config, preprocessor = open_clip.read_config(path)
        family_name, file = "clip", os.path.join(path, open_clip.CONFIG_NAME)
        weights_file = os.path.join(path, open_clip.WEIGHTS_NAME)
        if not os.path.isfile(weights_file):
            pickles = [name for name in open_clip.PICKLE_NAMES if os.path.isfile(os.path.join(path, name))]
            why = (f"its weights are pickle files ({', '.join(pickles)}), which vit_keras never loads (unpickling "
                   "can run code)" if pickles else f"its files are {sorted(os.listdir(path))}")
            raise ValueError(f"{path!r} has no {open_clip.WEIGHTS_NAME}: {why}. Use a repository that publishes "
                             "safetensors weights.")
        text = text_config(family_name, config, file, use_attention_mask=returns_attention_mask(path))
        vision = config["vision_config"]
        tensors = open_clip.to_transformers(
            dict(read_safetensors(weights_file)),
            {"visual.transformer": vision["num_hidden_layers"], "transformer": text.num_layers}, weights_file)
    else:
        family_name, config = read_config(path)
        file = os.path.join(path, CONFIG_NAME)
        text = text_config(family_name, config, file, use_attention_mask=returns_attention_mask(path))
        tensors = read_tensors(path)
        weights_file = os.path.join(path, WEIGHTS_NAME)
        preprocessor = _read_preprocessor(path)
    used: set = set()
    common = dict(family_name=family_name, num_heads=text.num_heads, file=weights_file, used=used)
    text_params = apply_rules(TEXT_RULES, tensors, num_layers=text.num_layers, **common)
    head_params = apply_rules(HEAD_RULES, tensors, num_layers=0, **common)
    vision_tensors = {key: value for key, value in tensors.items() if key.startswith(VISION_PREFIX)}
    # transformers keeps position_ids as a buffer in some older files; not a weight.
    unknown = sorted(key for key in tensors if key not in used and key not in vision_tensors
                     and not re.fullmatch(r"text_model\.embeddings\.position_ids", key))
    if unknown:
        raise ValueError(f"{weights_file!r} holds tensors a {FAMILIES[family_name].model_class} does not have: "
                         f"{unknown[:8]}{' ...' if len(unknown) > 8 else ''}; nothing was loaded. Check that the "
                         "file and its config.json describe the same model.")
    return Checkpoint(path=path, family_name=family_name, family=FAMILIES[family_name], config=config,
                      text_config=text, text_params=text_params, head_params=head_params,
                      vision_config=config["vision_config"], vision_tensors=vision_tensors, preprocessor=preprocessor)
