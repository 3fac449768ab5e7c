"""open_clip's layout of CLIP (`open_clip_config.json` + `open_clip_model.safetensors`, as open_clip's
`push_to_hf_hub` writes it): three rule tables (`vit_keras.weights.rules`) over the canonical names, the vision
tower's (`VISION_TABLE`), the text tower's (`TEXT_TABLE`) and the heads' (`HEAD_TABLE`), read by the same engine as
the transformers layout and run backwards by `vit_keras.save_pretrained(..., format="open_clip")`; the config
becomes `CLIPModel`'s.

Read: the OpenAI-style towers (`visual.transformer`, `transformer`) with their options at open_clip's defaults;
pooling at the largest token id (open_clip's `argmax`, what transformers does for eos_token_id 2). Refused, by
name: timm vision trunks (`visual.trunk`, open_clip's SigLIP and ConvNeXt models), LayerScale, attentional pooling
and the other non-default options, and pickle weights (`open_clip_pytorch_model.bin`).

Example:
    >>> [rule.source for rule in TEXT_TABLE.rules if rule.target == schema.TEXT_BLOCK_ATTENTION]
    ['transformer.resblocks.{i}.attn.in_proj']
"""

from __future__ import annotations

import dataclasses
import json
import os

from vit_keras.weights import rules, schema
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


def _resblocks(tower: str, norm_1: str, norm_2: str, attention: str, mlp_in: str,
               mlp_out: str) -> tuple:
    """The rules of open_clip's `resblocks` (a torch `MultiheadAttention`: q, k and v fused as `in_proj`)."""
    source = f"{tower}.resblocks.{{i}}"
    return (
        rules.Rule(f"{source}.ln_1", norm_1, rules.NORM, required=True),
        rules.Rule(f"{source}.attn.in_proj", attention, rules.fused("query", "key", "value", sep="_"),
                   required=True),
        rules.Rule(f"{source}.attn.out_proj", f"{attention}/out", rules.HEADS_OUT, required=True),
        rules.Rule(f"{source}.ln_2", norm_2, rules.NORM, required=True),
        rules.Rule(f"{source}.mlp.c_fc", mlp_in, rules.LINEAR, required=True),
        rules.Rule(f"{source}.mlp.c_proj", mlp_out, rules.LINEAR, required=True),
    )


# The vision tower (`visual.*`, its projection aside) over vit_keras' canonical names, read with the vision heads.
VISION_TABLE = rules.Table("open_clip vision tower", (
    rules.Rule("visual.class_embedding", "cls", rules.tokens(rank=1), required=True),
    rules.Rule("visual.positional_embedding", schema.POS_EMBEDDING, rules.tokens(rank=2), required=True),
    rules.Rule("visual.conv1", "embedding", rules.PATCH, required=True, bias="patch_bias"),
    rules.Rule("visual.ln_pre", "pre_norm", rules.NORM, required=True),
    *_resblocks("visual.transformer", schema.BLOCK_NORM_1, schema.BLOCK_NORM_2, schema.BLOCK_ATTENTION,
                schema.BLOCK_MLP_IN, schema.BLOCK_MLP_OUT),
    rules.Rule("visual.ln_post", "fc_norm", rules.NORM, required=True),
))
TEXT_TABLE = rules.Table("open_clip text tower", (
    rules.Rule("token_embedding", f"{schema.TEXT_EMBEDDING}/token_embedding", rules.ARRAY, required=True),
    rules.Rule("positional_embedding", f"{schema.TEXT_EMBEDDING}/position_embedding",
               dataclasses.replace(rules.ARRAY, weight=""), required=True),
    *_resblocks("transformer", schema.TEXT_BLOCK_NORM_1, schema.TEXT_BLOCK_NORM_2,
                schema.TEXT_BLOCK_ATTENTION, schema.TEXT_BLOCK_MLP_IN, schema.TEXT_BLOCK_MLP_OUT),
    rules.Rule("ln_final", schema.TEXT_FINAL_NORM, rules.NORM, required=True),
    rules.Rule("text_projection", schema.TEXT_PROJECTION, rules.MATRIX, required=True),
))
# The projections are matrices used as `x @ proj`; the logit scale a 0-d tensor.
HEAD_TABLE = rules.Table("open_clip heads", (
    rules.Rule("visual.proj", schema.VISUAL_PROJECTION, rules.MATRIX, required=True),
    rules.Rule(schema.LOGIT_SCALE, schema.LOGIT_SCALE, rules.scalar(0), required=True),
))
VISION_PREFIX = "visual."


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
