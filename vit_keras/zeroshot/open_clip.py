"""open_clip's layout of CLIP (`open_clip_config.json` + `open_clip_model.safetensors`, as open_clip's
`push_to_hf_hub` writes it), read as the transformers `CLIPModel` it is: a table of rules renames each tensor
(open_clip module → transformers module, `{i}` = block index), splits the fused attention projections and turns the
projection matrices (used as `x @ proj`) into Linear weights; the config becomes `CLIPModel`'s.

Read: the OpenAI-style towers (`visual.transformer`, `transformer`) with their options at open_clip's defaults;
pooling at the largest token id (open_clip's `argmax`, what transformers does for eos_token_id 2). Refused, by
name: timm vision trunks (`visual.trunk`, open_clip's SigLIP and ConvNeXt models), LayerScale, attentional pooling
and the other non-default options, and pickle weights (`open_clip_pytorch_model.bin`).

Example:
    >>> [(rule.source, rule.target) for rule in RULES if rule.kind == "qkv"][0]
    ('visual.transformer.resblocks.{i}.attn.in_proj', 'vision_model.encoder.layers.{i}.self_attn.{qkv}_proj')
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from vit_keras.zeroshot.families import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD

CONFIG_NAME = "open_clip_config.json"
WEIGHTS_NAME = "open_clip_model.safetensors"
PICKLE_NAMES = ("open_clip_pytorch_model.bin",)
# open_clip's CLIP defaults (open_clip/model.py CLIPVisionCfg, CLIPTextCfg).
VISION_DEFAULTS = {"layers": 12, "width": 768, "head_width": 64, "mlp_ratio": 4.0, "patch_size": 16,
                   "image_size": 224}
TEXT_DEFAULTS = {"context_length": 77, "vocab_size": 49408, "width": 512, "heads": 8, "layers": 12, "mlp_ratio": 4.0}
# Options whose non-default values change the architecture; vit_keras reads open_clip models at these defaults.
VISION_OPTIONS = {"ls_init_value": None, "patch_dropout": 0.0, "attentional_pool": False, "attn_pooler_queries": 256,
                  "no_ln_pre": False, "pos_embed_type": "learnable", "final_ln_after_pool": False,
                  "pool_type": "tok", "output_tokens": False, "timm_model_name": None, "act_kwargs": None,
                  "norm_kwargs": None}
TEXT_OPTIONS = {"ls_init_value": None, "embed_cls": False, "pad_id": 0, "no_causal_mask": False,
                "final_ln_after_pool": False, "pool_type": "argmax", "proj_bias": False, "proj_type": "linear",
                "output_tokens": False, "hf_model_name": None, "act_kwargs": None, "norm_kwargs": None}
QUICK_GELU = "quick_gelu"


@dataclasses.dataclass(frozen=True)
class Rule:
    """open_clip module `source` → transformers module `target`; `kind`: `"copy"` (weight and bias as they are),
    `"matrix"` (a projection used as `x @ P`: the Linear weight is Pᵀ, no bias), `"qkv"` (the fused in_proj split
    into q, k, v along its outputs), `"tensor"` (a bare tensor)."""

    source: str
    target: str
    kind: str = "copy"


def _blocks(source: str, target: str) -> tuple:
    block, layer = f"{source}.resblocks.{{i}}", f"{target}.encoder.layers.{{i}}"
    return (
        Rule(f"{block}.ln_1", f"{layer}.layer_norm1"),
        Rule(f"{block}.attn.in_proj", f"{layer}.self_attn.{{qkv}}_proj", "qkv"),
        Rule(f"{block}.attn.out_proj", f"{layer}.self_attn.out_proj"),
        Rule(f"{block}.ln_2", f"{layer}.layer_norm2"),
        Rule(f"{block}.mlp.c_fc", f"{layer}.mlp.fc1"),
        Rule(f"{block}.mlp.c_proj", f"{layer}.mlp.fc2"),
    )


RULES = (
    Rule("visual.class_embedding", "vision_model.embeddings.class_embedding", "tensor"),
    Rule("visual.positional_embedding", "vision_model.embeddings.position_embedding.weight", "tensor"),
    Rule("visual.conv1.weight", "vision_model.embeddings.patch_embedding.weight", "tensor"),
    Rule("visual.ln_pre", "vision_model.pre_layrnorm"),
    *_blocks("visual.transformer", "vision_model"),
    Rule("visual.ln_post", "vision_model.post_layernorm"),
    Rule("visual.proj", "visual_projection.weight", "matrix"),
    Rule("token_embedding.weight", "text_model.embeddings.token_embedding.weight", "tensor"),
    Rule("positional_embedding", "text_model.embeddings.position_embedding.weight", "tensor"),
    *_blocks("transformer", "text_model"),
    Rule("ln_final", "text_model.final_layer_norm"),
    Rule("text_projection", "text_projection.weight", "matrix"),
    Rule("logit_scale", "logit_scale", "tensor"),
)


def is_open_clip_dir(path: str) -> bool:
    """Whether `path` is an open_clip directory (it has open_clip_config.json and no transformers config.json).

    Example:
        >>> is_open_clip_dir("tests/fixtures/zeroshot/clip/checkpoint")
        False
    """
    return os.path.isfile(os.path.join(path, CONFIG_NAME)) and not os.path.isfile(os.path.join(path, "config.json"))


def _options(section: dict, defaults: dict, where: str, file: str) -> None:
    changed = sorted(key for key, default in defaults.items() if key in section and section[key] != default)
    if changed:
        raise ValueError(f"{file!r}: {where} sets {changed} ({', '.join(repr(section[k]) for k in changed)}), an "
                         f"open_clip architecture vit_keras does not implement; it reads OpenAI-style CLIP towers.")


def read_config(path: str) -> tuple[dict, dict | None]:
    """The transformers `CLIPModel` config.json an open_clip config describes, and the image processor's
    normalisation (`preprocess_cfg`).

    Example:
        >>> import tempfile
        >>> directory = tempfile.mkdtemp()
        >>> with open(os.path.join(directory, CONFIG_NAME), "w") as f:
        ...     json.dump({"model_cfg": {"embed_dim": 16, "vision_cfg": {"width": 32, "layers": 1, "head_width": 16,
        ...                "patch_size": 8, "image_size": 32}, "text_cfg": {"width": 24, "heads": 2, "layers": 1,
        ...                "context_length": 8, "vocab_size": 50}}}, f)
        >>> config, _ = read_config(directory)
        >>> config["vision_config"]["num_attention_heads"], config["text_config"]["intermediate_size"]
        (2, 96)
    """
    file = os.path.join(path, CONFIG_NAME)
    with open(file, encoding="utf-8") as f:
        raw = json.load(f)
    model = raw.get("model_cfg") if isinstance(raw, dict) else None
    if not isinstance(model, dict) or not isinstance(model.get("vision_cfg"), dict) or not isinstance(
            model.get("text_cfg"), dict):
        raise ValueError(f"{file!r} has no model_cfg with vision_cfg and text_cfg; it is not an open_clip model "
                         "config (open_clip's push_to_hf_hub writes one).")
    vision, text = {**VISION_DEFAULTS, **model["vision_cfg"]}, {**TEXT_DEFAULTS, **model["text_cfg"]}
    if vision.get("timm_model_name"):
        raise ValueError(f"{file!r}: the vision tower is the timm model {vision['timm_model_name']!r} "
                         "(open_clip's SigLIP and other timm-trunk models), which vit_keras.zeroshot does not read "
                         "in open_clip's layout; load the transformers conversion of the model instead.")
    _options(vision, VISION_OPTIONS, "vision_cfg", file)
    _options(text, TEXT_OPTIONS, "text_cfg", file)
    for key in ("layers", "width", "patch_size", "image_size", "head_width"):
        if not isinstance(vision[key], int) or isinstance(vision[key], bool):
            raise ValueError(f"{file!r}: vision_cfg.{key} must be an integer, got {vision[key]!r}.")
    if vision["width"] % vision["head_width"]:
        raise ValueError(f"{file!r}: vision_cfg width {vision['width']} is not a multiple of head_width "
                         f"{vision['head_width']}.")
    act = QUICK_GELU if model.get("quick_gelu") else "gelu"
    config = {
        "model_type": "clip", "projection_dim": model.get("embed_dim"),
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": vision["width"],
                          "num_hidden_layers": vision["layers"],
                          "num_attention_heads": vision["width"] // vision["head_width"],
                          "intermediate_size": int(vision["width"] * vision["mlp_ratio"]),
                          "patch_size": vision["patch_size"], "image_size": vision["image_size"],
                          "hidden_act": act, "layer_norm_eps": 1e-5, "num_channels": 3},
        # open_clip pools at argmax(ids) (the end-of-text token has the largest id): eos_token_id 2 says so.
        "text_config": {"model_type": "clip_text_model", "hidden_size": text["width"],
                        "num_hidden_layers": text["layers"], "num_attention_heads": text["heads"],
                        "intermediate_size": int(text["width"] * text["mlp_ratio"]),
                        "max_position_embeddings": text["context_length"], "vocab_size": text["vocab_size"],
                        "hidden_act": act, "layer_norm_eps": 1e-5, "eos_token_id": 2},
    }
    pre = raw.get("preprocess_cfg") or {}
    preprocessor = {"do_normalize": True, "image_mean": list(pre.get("mean", OPENAI_CLIP_MEAN)),
                    "image_std": list(pre.get("std", OPENAI_CLIP_STD))}
    return config, preprocessor


def to_transformers(tensors: dict, num_layers: dict, file: str) -> dict:
    """open_clip's tensors under transformers' `CLIPModel` names; a tensor the table does not know is refused.

    Example:
        >>> out = to_transformers({"visual.proj": np.ones((4, 2), "float32"), "logit_scale": np.array(1.0)},
        ...                       {"visual.transformer": 0, "transformer": 0}, "f")
        >>> out["visual_projection.weight"].shape
        (2, 4)
    """
    out, used = {}, set()
    for rule in RULES:
        tower = "visual.transformer" if rule.source.startswith("visual.transformer") else "transformer"
        indices = range(num_layers[tower]) if "{i}" in rule.source else (None,)
        for index in indices:
            source = rule.source.replace("{i}", str(index))
            target = rule.target.replace("{i}", str(index))
            if rule.kind in ("tensor", "matrix"):
                if source not in tensors:
                    continue  # a missing tensor is refused by the transformers table, by its transformers name
                used.add(source)
                out[target] = tensors[source].T if rule.kind == "matrix" else tensors[source]
            elif rule.kind == "qkv":
                for param in ("weight", "bias"):
                    key = f"{source}_{param}"
                    if key in tensors:
                        used.add(key)
                        for part, array in zip("qkv", np.split(tensors[key], 3, axis=0)):
                            out[f"{target.replace('{qkv}', part)}.{param}"] = array
            else:
                for param in ("weight", "bias"):
                    key = f"{source}.{param}"
                    if key in tensors:
                        used.add(key)
                        out[f"{target}.{param}"] = tensors[key]
    unknown = sorted(key for key in tensors if key not in used)
    if unknown:
        raise ValueError(f"{file!r} holds tensors of an open_clip architecture vit_keras does not read: "
                         f"{unknown[:8]}{' ...' if len(unknown) > 8 else ''}; nothing was loaded.")
    return out
