"""Read a transformers image-text directory (`CLIPModel`, `SiglipModel`, `Siglip2Model`: `config.json` with
`text_config` and `vision_config`, `model.safetensors` or a sharded index) into the text tower's architecture and
arrays, and the vision tower's own checkpoint.

The family's row (`vit_keras.zeroshot.families`) names the three rule tables, read by the one engine
(`vit_keras.weights.rules.apply_table`) over the canonical names (`vit_keras.weights.schema`): the text tower's
(its names are the text model's checkpoint names, `vit_keras.zeroshot.text.text_slots`), the heads' and the vision
tower's, whose tensors (`vision_model.*`) are handed whole to `vit_keras.from_pretrained` as the vision tower's
directory (`vit_keras.zeroshot.vision`); a tensor no table knows is refused by name.

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

from vit_keras.weights import hf, rules
from vit_keras.weights.hf_family_record import HIDDEN_ACTS
from vit_keras.weights.safetensors_io import read_safetensors
from vit_keras.zeroshot import open_clip
from vit_keras.zeroshot.families import FAMILIES, Family
from vit_keras.zeroshot.text_config import TextConfig
from vit_keras.zeroshot.tokenizer import returns_attention_mask

CONFIG_NAME = "config.json"
PREPROCESSOR_NAME = "preprocessor_config.json"
WEIGHTS_NAME = "model.safetensors"
VISION_PREFIX = "vision_model."
# transformers' CLIP rule: configs that say eos_token_id 2 (the first released ones) pool at the largest token id.
LEGACY_CLIP_EOS = 2


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
    layout: str = "transformers"  # or "open_clip": whose files it was read from


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


def split_tensors(tensors: dict, text_table: rules.Table, head_table: rules.Table, vision_prefix: str,
                  file: str, model_class: str) -> tuple[dict, dict, dict]:
    """(text, head, vision) tensors of a whole image-text checkpoint, each for its table; a tensor none of them
    knows is refused by name.

    Example:
        >>> family = FAMILIES["siglip"]
        >>> split_tensors({"logit_bias": 1}, family.text_table, family.head_table, VISION_PREFIX, "f", "m")[1]
        {'logit_bias': 1}
    """
    text, head, vision, unknown = {}, {}, {}, []
    for key, value in tensors.items():
        if head_table.knows(key):
            head[key] = value
        elif text_table.knows(key):
            text[key] = value
        elif key.startswith(vision_prefix):
            vision[key] = value
        else:
            unknown.append(key)
    if unknown:
        unknown = sorted(unknown)
        raise ValueError(f"{file!r} holds tensors a {model_class} does not have: {unknown[:8]}"
                         f"{' ...' if len(unknown) > 8 else ''}; nothing was loaded. Check that the file and its "
                         "config.json describe the same model.")
    return text, head, vision


def _read_preprocessor(path: str) -> dict | None:
    file = os.path.join(path, PREPROCESSOR_NAME)
    if not os.path.isfile(file):
        return None
    with open(file, encoding="utf-8") as f:
        return json.load(f)


def _open_clip_weights(path: str) -> str:
    weights_file = os.path.join(path, open_clip.WEIGHTS_NAME)
    if not os.path.isfile(weights_file):
        pickles = [name for name in open_clip.PICKLE_NAMES if os.path.isfile(os.path.join(path, name))]
        why = (f"its weights are pickle files ({', '.join(pickles)}), which vit_keras never loads (unpickling "
               "can run code)" if pickles else f"its files are {sorted(os.listdir(path))}")
        raise ValueError(f"{path!r} has no {open_clip.WEIGHTS_NAME}: {why}. Use a repository that publishes "
                         "safetensors weights.")
    return weights_file


def read_checkpoint(path: str) -> Checkpoint:
    """Read an image-text directory (transformers, or open_clip's layout of CLIP: `vit_keras.zeroshot.open_clip`):
    refuses what it cannot run, naming the file and the key."""
    path = os.fspath(path)
    if open_clip.is_open_clip_dir(path):
        config, preprocessor = open_clip.read_config(path)
        family_name, file = "clip", os.path.join(path, open_clip.CONFIG_NAME)
        weights_file = _open_clip_weights(path)
        tensors = read_safetensors(weights_file)
        text_table, head_table, vision_prefix = open_clip.TEXT_TABLE, open_clip.HEAD_TABLE, open_clip.VISION_PREFIX
    else:
        family_name, config = read_config(path)
        file = os.path.join(path, CONFIG_NAME)
        tensors = hf.read_tensors(path)
        weights_file = os.path.join(path, WEIGHTS_NAME)
        preprocessor = _read_preprocessor(path)
        text_table, head_table = FAMILIES[family_name].text_table, FAMILIES[family_name].head_table
        vision_prefix = VISION_PREFIX
    family = FAMILIES[family_name]
    text = text_config(family_name, config, file, use_attention_mask=returns_attention_mask(path))
    text_tensors, head_tensors, vision_tensors = split_tensors(tensors, text_table, head_table, vision_prefix,
                                                               weights_file, family.model_class)
    text_params = dict(rules.apply_table(text_table, text_tensors, num_heads=text.num_heads, source=weights_file))
    head_params = dict(rules.apply_table(head_table, head_tensors, num_heads=1, source=weights_file))
    if vision_prefix != VISION_PREFIX:
        # Another library's layout: its vision tower, read by its table, is handed on in transformers' layout.
        heads = config["vision_config"]["num_attention_heads"]
        vision_params = rules.apply_table(open_clip.VISION_TABLE, vision_tensors, num_heads=heads,
                                          source=weights_file)
        vision_tensors = rules.invert_table(family.vision.table, vision_params, num_heads=heads,
                                            prefix=VISION_PREFIX)
    return Checkpoint(path=path, family_name=family_name, family=family, config=config, text_config=text,
                      text_params=text_params, head_params=head_params, vision_config=config["vision_config"],
                      vision_tensors=vision_tensors, preprocessor=preprocessor,
                      layout="transformers" if vision_prefix == VISION_PREFIX else "open_clip")
