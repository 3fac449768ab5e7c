"""The readers of transformers' task checkpoints: for each model type, the config.json keys that give the backbone's
`ViTConfig` fields (a `vit_keras.weights.hf_family_record.Family` row, as the backbones' readers) and one rule
table onto the canonical names (`vit_keras.weights.schema`, with the task heads' `vit_keras.weights.task_schema`): the
backbone's rows and the head's. `vit_keras.weights.rules.apply_table` reads a file with it, all of it or nothing.

Example:
    >>> sorted(TASK_FAMILIES)
    ['depth_anything', 'eomt', 'vitpose']
    >>> TASK_FAMILIES["eomt"].table.family
    'Hugging Face eomt'
"""

from __future__ import annotations

import dataclasses

import numpy as np

from vit_keras.weights import json_config, rules, schema
from vit_keras.weights.hf_family_record import (
    ACTIVATION,
    MLP_RATIO,
    QKV_BIAS,
    REGISTERS,
    SIZE,
    SIZES,
    Family,
    Key,
    RefusedKey,
    image_size,
    layer_norm_eps,
)
from vit_keras.weights.hf_family_rows import FAMILIES

# A convolution without a bias (DPT's neck convolutions, EoMT's depthwise convolution).
CONV_NO_BIAS = dataclasses.replace(rules.PATCH, bias=None, outputs=("kernel",))
# A transposed convolution: torch's (in, out, kh, kw) -> (kh, kw, out, in), the same axis order as a convolution's.
CONV_TRANSPOSE = rules.PATCH
CONV_TRANSPOSE_NO_BIAS = CONV_NO_BIAS


def _batch_norm_statistics(target, mean, variance, num_heads):
    return {f"{target}/mean": np.asarray(mean, np.float32), f"{target}/variance": np.asarray(variance, np.float32)}


def _batch_norm_statistics_back(target, params, num_heads):
    return np.asarray(params[f"{target}/mean"], np.float32), np.asarray(params[f"{target}/variance"], np.float32)


# A BatchNorm2d's running statistics (its weight and bias are a NORM rule on the same module).
BATCH_NORM_STATISTICS = rules.Transform(_batch_norm_statistics, ("mean", "variance"), weight="running_mean",
                                        bias="running_var", inverse=_batch_norm_statistics_back)


def _class_entry_added(target, weight, bias, num_heads):
    table = np.asarray(weight, np.float32)
    table = table.reshape(1, -1, table.shape[-1])
    return {target: table[:, 1:] + table[:, :1]}


def _class_entry_added_back(target, params, num_heads):
    table = np.asarray(params[target], np.float32)
    return np.concatenate([np.zeros_like(table[:, :1]), table], axis=1), None


# ViTPose's (1, 1 + N, D) table without a class token: every patch gets its row plus the class row (the way back
# writes that sum with a zero class row, the same function).
CLASS_ENTRY_ADDED = rules.Transform(_class_entry_added, ("",), weight="", bias=None,
                                    inverse=_class_entry_added_back)

_SWIGLU_FFN = RefusedKey(("use_swiglu_ffn",), "a SwiGLU MLP")


def _square_patch(value, fields):
    rows, cols = value
    if rows != cols:
        raise ValueError(f"patch_size {list(value)} is not square; vit_keras models cut square patches.")
    return {"patch_size": rows}


def _attention_rows(block: str, names, transforms) -> tuple:
    targets = [f"{schema.BLOCK_ATTENTION}/{part}" for part in schema.PROJECTIONS]
    return tuple(rules.Rule(f"{block}.{name}", target, transform, required=True,
                            bias="qkv_bias" if part != "out" else True)
                 for name, target, part, transform in zip(names, targets, schema.PROJECTIONS, transforms))


def _block_rows(block: str, norms, attention, mlp, layer_scale: bool) -> tuple:
    rows = (
        rules.Rule(f"{block}.{norms[0]}", schema.BLOCK_NORM_1, rules.NORM, required=True),
        *_attention_rows(block, attention, (rules.HEADS_IN,) * 3 + (rules.HEADS_OUT,)),
        rules.Rule(f"{block}.{norms[1]}", schema.BLOCK_NORM_2, rules.NORM, required=True),
        rules.Rule(f"{block}.{mlp[0]}", schema.BLOCK_MLP_IN, rules.LINEAR, required=True),
        rules.Rule(f"{block}.{mlp[1]}", schema.BLOCK_MLP_OUT, rules.LINEAR, required=True),
    )
    if layer_scale:
        rows += (rules.Rule(f"{block}.layer_scale1", schema.BLOCK_SCALE_1, rules.scale("lambda1"), required=True),
                 rules.Rule(f"{block}.layer_scale2", schema.BLOCK_SCALE_2, rules.scale("lambda1"), required=True))
    return rows


def _required(rule: rules.Rule, prefix: str = "") -> rules.Rule:
    return dataclasses.replace(rule, source=prefix + rule.source, required=True)


# ---- EoMT (transformers models/eomt): a DINOv2-style ViT whose last `num_blocks` blocks carry the queries

EOMT = Family(
    "eomt", "EomtForUniversalSegmentation",
    fixed=dict(layer_scale=True, no_embed_class=True),
    keys=(*SIZES, ACTIVATION, QKV_BIAS, image_size(), MLP_RATIO, layer_norm_eps(1e-6),
          Key("num_register_tokens", int, 4, field="num_register_tokens")),
    refuses=(_SWIGLU_FFN,),
    table=rules.Table("Hugging Face eomt", (
        rules.Rule("embeddings.patch_embeddings.projection", "embedding", rules.PATCH, required=True,
                   bias="patch_bias"),
        rules.Rule("embeddings.cls_token", "cls", rules.TOKENS, required=True),
        rules.Rule("embeddings.register_tokens", "reg", REGISTERS),  # (1, 0, D) without registers
        rules.Rule("embeddings.position_embeddings", schema.POS_EMBEDDING, rules.tokens("weight", rank=2),
                   required=True),
        *_block_rows("layers.{i}", ("norm1", "norm2"), ("attention.q_proj", "attention.k_proj", "attention.v_proj",
                                                        "attention.out_proj"), ("mlp.fc1", "mlp.fc2"), True),
        rules.Rule("layernorm", schema.ENCODER_NORM, rules.NORM, required=True),
        rules.Rule("query", "queries/embedding", rules.tokens("weight", rank=2), required=True),
        rules.Rule("class_predictor", "class_head", rules.LINEAR, required=True),
        rules.Rule("mask_head.fc{k}", "mask_head/fc{k}", rules.LINEAR, required=True),
        rules.Rule("upscale_block.block.{u}.conv1", "upscale/block_{u}/deconv", CONV_TRANSPOSE, required=True),
        rules.Rule("upscale_block.block.{u}.conv2", "upscale/block_{u}/dwconv", CONV_NO_BIAS, required=True),
        rules.Rule("upscale_block.block.{u}.layernorm2d", "upscale/block_{u}/norm", rules.NORM, required=True),
    ), ignored=("attn_mask_probs", "criterion.empty_weight")),
    # Not read here: attn_mask_probs (a buffer: which masked blocks compute a mask, read by the model builder) and
    # the loss's weights (criterion.*, class_weight, dice_weight, ...: training only).
)

# ---- Depth Anything (transformers models/depth_anything) on a Dinov2Backbone

_DINOV2 = FAMILIES["dinov2"]
DEPTH_ANYTHING = dataclasses.replace(
    _DINOV2, model_type="depth_anything", classes="DepthAnythingForDepthEstimation",
    table=rules.Table("Hugging Face depth_anything", (
        *[_required(rule, "backbone.") if rule.target == schema.ENCODER_NORM else
          dataclasses.replace(rule, source="backbone." + rule.source)
          for rule in _DINOV2.table.rules if rule.target != "head"],
        rules.Rule("neck.reassemble_stage.layers.{s}.projection", "neck/reassemble_{s}/projection", rules.PATCH,
                   required=True),
        rules.Rule("neck.reassemble_stage.layers.{s}.resize", "neck/reassemble_{s}/resize", rules.PATCH),
        rules.Rule("neck.convs.{s}", "neck/conv_{s}", CONV_NO_BIAS, required=True),
        rules.Rule("neck.fusion_stage.layers.{s}.projection", "neck/fusion_{s}/projection", rules.PATCH,
                   required=True),
        rules.Rule("neck.fusion_stage.layers.{s}.residual_layer{r}.convolution{c}",
                   "neck/fusion_{s}/residual_{r}/conv_{c}", rules.PATCH, required=True),
        rules.Rule("head.conv{c}", "depth_head/conv_{c}", rules.PATCH, required=True),
    ), ignored=("backbone.embeddings.mask_token",)),
)

# ---- ViTPose (transformers models/vitpose, vitpose_backbone): a plain ViT without a class token

VITPOSE = Family(
    "vitpose", "VitPoseForPoseEstimation",
    fixed=dict(class_token=False, global_pool="avg"),  # no class token; the pooling is never used
    keys=(*[key for key in SIZES if key.name != "patch_size"], ACTIVATION, QKV_BIAS, image_size(), MLP_RATIO,
          layer_norm_eps(1e-12), Key("patch_size", SIZE, derive=_square_patch)),
    table=rules.Table("Hugging Face vitpose", (
        rules.Rule("backbone.embeddings.patch_embeddings.projection", "embedding", rules.PATCH, required=True,
                   bias="patch_bias"),
        rules.Rule("backbone.embeddings.position_embeddings", schema.POS_EMBEDDING, CLASS_ENTRY_ADDED,
                   required=True),
        *_block_rows("backbone.encoder.layer.{i}", ("layernorm_before", "layernorm_after"),
                     ("attention.attention.query", "attention.attention.key", "attention.attention.value",
                      "attention.output.dense"), ("mlp.fc1", "mlp.fc2"), False),
        rules.Rule("backbone.layernorm", schema.ENCODER_NORM, rules.NORM, required=True),
        # the simple decoder's convolution, or the classic decoder's (the transposed convolutions say which)
        rules.Rule("head.conv", "pose_head/conv", rules.PATCH, required=True),
        rules.Rule("head.deconv{d}", "pose_head/deconv_{d}", CONV_TRANSPOSE_NO_BIAS),
        rules.Rule("head.batchnorm{d}", "pose_head/norm_{d}", rules.NORM),
        rules.Rule("head.batchnorm{d}", "pose_head/norm_{d}", BATCH_NORM_STATISTICS),
    ), refused=(("experts", "ViTPose++'s mixture-of-experts MLPs without num_experts > 1 in its config"),)),
)

TASK_FAMILIES = {family.model_type: family for family in (EOMT, DEPTH_ANYTHING, VITPOSE)}


def read_backbone(family: Family, config: dict, file: str) -> tuple[dict, dict]:
    """(the backbone's `ViTConfig` fields, the bias switches) of a task config.json (`backbone_config` where the
    model nests its backbone's config).

    Example:
        >>> read_backbone(EOMT, {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 2,
        ...                      "patch_size": 8, "image_size": 32}, "config.json")[0]["num_register_tokens"]
        4
    """
    backbone = json_config.require(config, "backbone_config", dict, file) if family is not EOMT else config
    return family.read(backbone, file)
