"""Every transformers vision tower vit_keras reads, as one `Family` row each (`vit_keras.weights.hf_family_record`):
`vit` (`ViTModel`, `ViTForImageClassification`: the pooler `tanh(dense(token))` is vit_jax's `pre_logits`),
`dinov2` (`Dinov2Model`: LayerScale), `clip_vision_model` (`CLIPVisionModel`: `pre_layrnorm`, quick-GELU,
`post_layernorm` on the class token only), `siglip_vision_model` (`SiglipVisionModel`: no class token,
`post_layernorm` on every token, the attention-pooling `head`), `siglip2_vision_model` (`Siglip2VisionModel`,
NaFlex), `radio` (`RadioModel`, hooks in `vit_keras.weights.hf_radio`), `dinov3_vit` (`DINOv3ViTModel`), `ijepa`
(`IJepaModel`, `IJepaForImageClassification`) and `aimv2_vision_model` (`Aimv2VisionModel`, or the vision tower of a
whole `aimv2` `Aimv2Model`). The rule tables are over the names `save_pretrained` writes (transformers 5.x).

Biases absent by architecture are read as zeros only where that is exactly the same function and vit_keras' part
has the bias anyway: DINOv3's key projection (softmax is invariant to a key bias, which adds the same q·b_k to every
logit of a row), and a projection whose config says it has no bias while vit_keras' part has one (a q or v beside
the others' biases, an output projection, a plain MLP: a zero bias adds nothing). A bias the config says is there
and the file lacks is refused (`rules`' `bias` switches).

Example:
    >>> FAMILIES["ijepa"].read({"hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3,
    ...                         "intermediate_size": 96, "patch_size": 8}, "config.json")[0]["global_pool"]
    'avg'
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from vit_keras.weights import hf_radio, json_config, rules, schema
from vit_keras.weights.hf_family_record import (
    ACTIVATION,
    ACTIVATIONS,
    INTERMEDIATE_SIZE,
    INTERMEDIATE_SIZE_4X,
    MLP_RATIO,
    QKV_BIAS,
    REGISTERS,
    RMS_NORM,
    SIZES,
    Family,
    Key,
    RefusedKey,
    WholeModel,
    image_size,
    layer_norm_eps,
    zero_bias,
)

# ---- the parts the tables share

def _embeddings(cls: str, pos: tuple[str, rules.Transform], patch: str, cls_rank: int = 3) -> tuple:
    return (
        rules.Rule(patch, "embedding", rules.PATCH, required=True, bias="patch_bias"),
        rules.Rule(cls, "cls", rules.tokens(rank=cls_rank)),
        rules.Rule(pos[0], schema.POS_EMBEDDING, pos[1]),
    )


def _block(layer: str, norm_1: str, norm_2: str, qkv: tuple[str, str, str], out: str, mlp: tuple[str, str]):
    block = f"{layer}.{{i}}"
    return (
        rules.Rule(f"{block}.{norm_1}", schema.BLOCK_NORM_1, rules.NORM, required=True),
        *[rules.Rule(f"{block}.{source}", f"{schema.BLOCK_ATTENTION}/{target}", rules.HEADS_IN, required=True,
                     bias="qkv_bias") for source, target in zip(qkv, ("query", "key", "value"))],
        rules.Rule(f"{block}.{out}", f"{schema.BLOCK_ATTENTION}/out", rules.HEADS_OUT, required=True),
        rules.Rule(f"{block}.{norm_2}", schema.BLOCK_NORM_2, rules.NORM, required=True),
        rules.Rule(f"{block}.{mlp[0]}", schema.BLOCK_MLP_IN, rules.LINEAR, required=True),
        rules.Rule(f"{block}.{mlp[1]}", schema.BLOCK_MLP_OUT, rules.LINEAR, required=True),
    )


def _attention(block: str, names: tuple[str, str, str, str], biases: tuple, transforms: tuple) -> tuple:
    """q, k, v and output projection rules of one attention module."""
    targets = [f"{schema.BLOCK_ATTENTION}/{part}" for part in schema.PROJECTIONS]
    return tuple(rules.Rule(f"{block}.{name}", target, transform, required=True, bias=bias)
                 for name, target, bias, transform in zip(names, targets, biases, transforms))


_VIT_EMBEDDINGS = _embeddings("embeddings.cls_token", ("embeddings.position_embeddings", rules.TOKENS),
                              "embeddings.patch_embeddings.projection")
_VIT_QKV = ("attention.attention.query", "attention.attention.key", "attention.attention.value")
_CLIP_EMBEDDINGS = _embeddings("embeddings.class_embedding",
                               ("embeddings.position_embedding", rules.tokens("weight", rank=2)),
                               "embeddings.patch_embedding", cls_rank=1)
_CLIP_BLOCKS = _block("encoder.layers", "layer_norm1", "layer_norm2",
                      ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "self_attn.out_proj",
                      ("mlp.fc1", "mlp.fc2"))
_MAP = "attention-pooling head"
_SIGLIP_TOP = (
    # SigLIP normalises every token: its post_layernorm is the final norm.
    rules.Rule("post_layernorm", schema.ENCODER_NORM, rules.NORM, required=True),
    rules.Rule("head.probe", f"{schema.MAP_HEAD}/probe", rules.TOKENS, part=_MAP),
    rules.Rule("head.attention.in_proj", schema.MAP_ATTENTION, rules.fused("query", "key", "value", sep="_"),
               part=_MAP),
    rules.Rule("head.attention.out_proj", f"{schema.MAP_ATTENTION}/out", rules.HEADS_OUT, part=_MAP),
    rules.Rule("head.layernorm", schema.MAP_NORM, rules.NORM, part=_MAP),
    rules.Rule("head.mlp.fc1", schema.MAP_MLP_IN, rules.LINEAR, part=_MAP),
    rules.Rule("head.mlp.fc2", schema.MAP_MLP_OUT, rules.LINEAR, part=_MAP),
)
# DINOv2 giant's and RADIO's SwiGLU MLP.
_SWIGLU_FFN = RefusedKey(("use_swiglu_ffn",), "a SwiGLU MLP, as in DINOv2 giant")
# SiglipVisionModel's attention-pooling head is optional.
_USE_HEAD = Key("vision_use_head", bool, True, values={True: {"global_pool": "map"}, False: {"global_pool": "avg"}})
# The keys of the ViT-style configs (ViTConfig, Dinov2Config, CLIPVisionConfig, SiglipVisionConfig, RADIO).
_VIT_KEYS = (*SIZES, ACTIVATION, QKV_BIAS)


# ---- ViT, DINOv2, CLIP, SigLIP, SigLIP 2 (transformers models/vit, _dinov2, _clip, _siglip, _siglip2)

VIT = Family(
    "vit", "ViTModel, ViTForImageClassification",
    fixed={},
    keys=(*_VIT_KEYS, image_size(), INTERMEDIATE_SIZE_4X, layer_norm_eps(1e-12)),
    table=rules.Table("Hugging Face vit", (
        *_VIT_EMBEDDINGS,
        *_block("encoder.layer", "layernorm_before", "layernorm_after", _VIT_QKV, "attention.output.dense",
                ("intermediate.dense", "output.dense")),
        rules.Rule("layernorm", schema.ENCODER_NORM, rules.NORM),
        # ViTModel's pooler, tanh(dense(token)), is vit_jax's pre_logits.
        rules.Rule("pooler.dense", "pre_logits", rules.LINEAR),
        rules.Rule("classifier", "head", rules.LINEAR),
    ), prefixes=("vit.",), ignored=("embeddings.mask_token",)),
    # Not read: the dropouts (training only); encoder_stride configures ViTForMaskedImageModeling's decoder.
)

DINOV2 = Family(
    "dinov2", "Dinov2Model",
    fixed=dict(layer_scale=True),
    keys=(*_VIT_KEYS, image_size(), MLP_RATIO, layer_norm_eps(1e-6)),
    refuses=(_SWIGLU_FFN,),
    table=rules.Table("Hugging Face dinov2", (
        *_VIT_EMBEDDINGS,
        *_block("encoder.layer", "norm1", "norm2", _VIT_QKV, "attention.output.dense", ("mlp.fc1", "mlp.fc2")),
        rules.Rule("encoder.layer.{i}.layer_scale1", schema.BLOCK_SCALE_1, rules.scale("lambda1"), required=True),
        rules.Rule("encoder.layer.{i}.layer_scale2", schema.BLOCK_SCALE_2, rules.scale("lambda1"), required=True),
        rules.Rule("layernorm", schema.ENCODER_NORM, rules.NORM),
        rules.Rule("classifier", "head", rules.LINEAR),
    ), prefixes=("dinov2.",), ignored=("embeddings.mask_token",)),
    # Not read: layerscale_value (LayerScale's initial value: the file holds the trained scales), drop_path_rate and
    # the dropouts (training only).
)

CLIP = Family(
    "clip_vision_model", "CLIPVisionModel",
    fixed=dict(pre_norm=True, fc_norm=True, patch_bias=False),
    keys=(*_VIT_KEYS, image_size(), INTERMEDIATE_SIZE_4X, layer_norm_eps(1e-6)),
    whole=WholeModel("clip"),
    table=rules.Table("Hugging Face clip_vision_model", (
        *_CLIP_EMBEDDINGS,
        rules.Rule("pre_layrnorm", "pre_norm", rules.NORM, required=True),
        *_CLIP_BLOCKS,
        # CLIP normalises the pooled class token only: its post_layernorm is fc_norm.
        rules.Rule("post_layernorm", "fc_norm", rules.NORM, required=True),
    ), prefixes=("vision_model.",)),
    # Not read: attention_dropout (training only), projection_dim (CLIPVisionModelWithProjection's projection).
)

SIGLIP = Family(
    "siglip_vision_model", "SiglipVisionModel",
    fixed=dict(class_token=False),
    keys=(*_VIT_KEYS, image_size(), INTERMEDIATE_SIZE_4X, layer_norm_eps(1e-6), _USE_HEAD),
    whole=WholeModel("siglip"),
    table=rules.Table("Hugging Face siglip_vision_model", (
        *_CLIP_EMBEDDINGS,
        *_CLIP_BLOCKS,
        *_SIGLIP_TOP,
    ), prefixes=("vision_model.",)),
    # Not read: attention_dropout (training only).
)


def _naflex_image_size(config: dict, file: str, fields: dict, biases: dict) -> dict:
    """The image size of a SigLIP 2 NaFlex position grid: `num_patches` (a square grid) times the patch size."""
    num_patches = json_config.require(config, "num_patches", int, file, positive=True)
    side = int(round(num_patches ** 0.5))
    if side * side != num_patches:
        raise ValueError(f"{file!r}: num_patches {num_patches} is not a square grid, which Siglip2VisionModel "
                         "stores; check the config.")
    return {"image_size": (side * fields["patch_size"], side * fields["patch_size"])}


SIGLIP2 = Family(
    "siglip2_vision_model", "Siglip2VisionModel",
    fixed=dict(class_token=False),
    keys=(*_VIT_KEYS, INTERMEDIATE_SIZE_4X, layer_norm_eps(1e-6), _USE_HEAD),
    whole=WholeModel("siglip2"),
    # NaFlex: no fixed image size; the position grid is resized per image with torch's antialiased bilinear.
    naflex=True, derive=_naflex_image_size,
    # A Linear on (row, column, channel)-flattened patches, a square position grid.
    table=rules.Table("Hugging Face siglip2_vision_model", (
        rules.Rule("embeddings.patch_embedding", "embedding", rules.LINEAR_PATCH, required=True, bias="patch_bias"),
        rules.Rule("embeddings.position_embedding", schema.POS_EMBEDDING, rules.tokens("weight", rank=2),
                   required=True),
        *_CLIP_BLOCKS,
        *_SIGLIP_TOP,
    ), prefixes=("vision_model.",)),
    # Not read: attention_dropout (training only).
)


# ---- RADIO (transformers' RadioModel writes the original RADIO names, radio_model.model.*: the timm-style block)

RADIO = Family(
    "radio", "RadioModel",
    fixed=dict(layer_scale=True, no_embed_class=True, patch_bias=False, final_norm=False, fc_norm=False,
               global_pool="token", pos_interpolation="bilinear_crop"),
    keys=(*_VIT_KEYS, image_size(), MLP_RATIO, layer_norm_eps(1e-6)),
    refuses=(_SWIGLU_FFN, RefusedKey(("video_patch_dim", "video_temporal_patch_size"),
                                     "RADIO's video patch embedding; vit_keras reads image-only RadioModel checkpoints"
                                     )),
    derive=hf_radio.radio_fields, finish=hf_radio.finish,
    table=rules.Table("Hugging Face radio", (
        rules.Rule("patch_generator.embedder", "embedding", rules.LINEAR_PATCH_CHW, required=True),
        # The class tokens, then the registers, in one tensor: the `finish` hook splits it by config.json's counts.
        rules.Rule(hf_radio.TOKENS, "cls", rules.TOKENS, required=True),
        rules.Rule("patch_generator.pos_embed", schema.POS_EMBEDDING, rules.TOKENS, required=True),
        rules.Rule("blocks.{i}.norm1", schema.BLOCK_NORM_1, rules.NORM, required=True),
        rules.Rule("blocks.{i}.attn.qkv", schema.BLOCK_ATTENTION, rules.fused("query", "key", "value"),
                   required=True, bias="qkv_bias"),
        rules.Rule("blocks.{i}.attn.proj", f"{schema.BLOCK_ATTENTION}/out", rules.HEADS_OUT, required=True),
        rules.Rule("blocks.{i}.layer_scale1", schema.BLOCK_SCALE_1, rules.scale("lambda1"), required=True),
        rules.Rule("blocks.{i}.norm2", schema.BLOCK_NORM_2, rules.NORM, required=True),
        rules.Rule("blocks.{i}.mlp.fc1", schema.BLOCK_MLP_IN, rules.LINEAR, required=True),
        rules.Rule("blocks.{i}.mlp.fc2", schema.BLOCK_MLP_OUT, rules.LINEAR, required=True),
        rules.Rule("blocks.{i}.layer_scale2", schema.BLOCK_SCALE_2, rules.scale("lambda1"), required=True),
    ), prefixes=("radio_model.model.", "radio_model."), ignored=hf_radio.BUFFERS,
        refused=(("video_embedder", "a video patch embedding"), ("mlp.w12", "a SwiGLU MLP (use_swiglu_ffn)"))),
)


# ---- DINOv3 (transformers models/dinov3_vit: DINOv3ViTModel)

_DINOV3_BLOCK = "layer.{i}"
# hidden_act of a gated MLP: down(act(gate(x)) * up(x)) with SiLU is SwiGLU, the one gated MLP vit_keras has.
_GATED_ACTS = {"silu": {"mlp": "swiglu", "activation": "gelu"}, "swish": {"mlp": "swiglu", "activation": "gelu"}}
_PLAIN_ACTS = {act: {"mlp": "gelu", **fields} for act, fields in ACTIVATIONS.items()}


@functools.cache
def _dinov3_table(gated: bool, qkv_bias: bool, mlp_bias: bool) -> rules.Table:
    # q/k/v: vit_keras has all three biases or none; with any of them, the others are zeros (the key's exactly, by
    # softmax's invariance; q and v because the config says they add nothing). The output and a plain MLP always
    # have biases in vit_keras: zeros where the config says there are none.
    heads_in = zero_bias(rules.HEADS_IN) if qkv_bias else rules.HEADS_IN
    linear = rules.LINEAR if gated or mlp_bias else zero_bias(rules.LINEAR)
    block = _DINOV3_BLOCK
    if gated:
        mlp = (rules.Rule(f"{block}.mlp.gate_proj", schema.BLOCK_MLP_GATE, linear, required=True, bias="mlp_bias"),
               rules.Rule(f"{block}.mlp.up_proj", schema.BLOCK_MLP_VALUE, linear, required=True, bias="mlp_bias"))
    else:
        mlp = (rules.Rule(f"{block}.mlp.up_proj", schema.BLOCK_MLP_IN, linear, required=True, bias="mlp_bias"),)
    return rules.Table("Hugging Face dinov3_vit", (
        rules.Rule("embeddings.patch_embeddings", "embedding", rules.PATCH, required=True),
        rules.Rule("embeddings.cls_token", "cls", rules.TOKENS, required=True),
        rules.Rule("embeddings.register_tokens", "reg", REGISTERS),
        rules.Rule(f"{block}.norm1", schema.BLOCK_NORM_1, rules.NORM, required=True),
        *_attention(block, ("attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj"),
                    ("query_bias", "key_bias", "value_bias", "proj_bias"),
                    (heads_in, heads_in, heads_in, zero_bias(rules.HEADS_OUT))),
        rules.Rule(f"{block}.layer_scale1", schema.BLOCK_SCALE_1, rules.scale("lambda1"), required=True),
        rules.Rule(f"{block}.norm2", schema.BLOCK_NORM_2, rules.NORM, required=True),
        *mlp,
        rules.Rule(f"{block}.mlp.down_proj", schema.BLOCK_MLP_OUT, linear, required=True, bias="mlp_bias"),
        rules.Rule(f"{block}.layer_scale2", schema.BLOCK_SCALE_2, rules.scale("lambda1"), required=True),
        rules.Rule("norm", schema.ENCODER_NORM, rules.NORM, required=True),
    ), ignored=("embeddings.mask_token",))


def _dinov3_mlp(config: dict, file: str, fields: dict, biases: dict) -> dict:
    """The MLP (use_gated_mlp and hidden_act together) and the biases vit_keras' parts have: q/k/v all or none,
    and a plain MLP always (its absent biases read as zeros; a gated MLP may drop them, as config.json's mlp_bias
    says)."""
    gated = json_config.require(config, "use_gated_mlp", bool, file, default=False)
    act = json_config.require(config, "hidden_act", str, file, default="gelu")
    choices = _GATED_ACTS if gated else _PLAIN_ACTS
    if act not in choices:
        raise ValueError(f"{file!r}: hidden_act {act!r} with use_gated_mlp={gated}; vit_keras runs "
                         f"{'a gated MLP with' if gated else 'a plain MLP with'} hidden_act in {sorted(choices)}.")
    qkv_bias = any(biases[key] for key in ("query_bias", "key_bias", "value_bias"))
    return {**choices[act], "qkv_bias": qkv_bias, "mlp_bias": biases["mlp_bias"] if gated else True}


def _dinov3_rule_table(fields: Mapping, switches: Mapping) -> rules.Table:
    # The table reads the file's MLP biases as config.json's mlp_bias switch says, whatever vit_keras' part keeps.
    return _dinov3_table(fields["mlp"] != "gelu", fields["qkv_bias"], switches["mlp_bias"])


DINOV3 = Family(
    "dinov3_vit", "DINOv3ViTModel",
    # pooler_output is the class token after the final LayerNorm; RoPE replaces absolute position embeddings.
    fixed=dict(class_token=True, global_pool="token", position_embedding="none", rope="rotate_half", layer_scale=True,
               patch_bias=True, qkv_bias=True, mlp_bias=True),
    keys=(
        *SIZES, image_size(224), INTERMEDIATE_SIZE,
        layer_norm_eps(1e-5),
        Key("rope_theta", float, 100.0, field="rope_temperature", positive=True),
        Key("num_register_tokens", int, 0, field="num_register_tokens"),
    ),
    bias_keys=(("query_bias", True), ("key_bias", False), ("value_bias", True), ("proj_bias", True),
               ("mlp_bias", True)),
    derive=_dinov3_mlp,
    table=_dinov3_rule_table,
    # Not read: the RoPE coordinate augmentations pos_embed_shift / _jitter / _rescale run in training mode only
    # (`if self.training`), as do drop_path_rate and attention_dropout; layerscale_value is LayerScale's initial
    # value (the file holds the trained scales); apply_layernorm, reshape_hidden_states, out_features / out_indices
    # configure DINOv3ViTBackbone's feature maps, not DINOv3ViTModel.
)


# ---- I-JEPA (transformers models/ijepa: the ViT layout without a class token)

_VIT_BLOCK = "encoder.layer.{i}"
IJEPA = Family(
    "ijepa", "IJepaModel, IJepaForImageClassification",
    # No class token: the classifier (and pooling="avg") reads the mean of the tokens after the final LayerNorm.
    fixed=dict(class_token=False, global_pool="avg", position_embedding="learned_1d", patch_bias=True),
    keys=(*SIZES, image_size(224), INTERMEDIATE_SIZE, ACTIVATION, layer_norm_eps(1e-12), QKV_BIAS),
    table=rules.Table("Hugging Face ijepa", (
        rules.Rule("embeddings.patch_embeddings.projection", "embedding", rules.PATCH, required=True),
        rules.Rule("embeddings.position_embeddings", schema.POS_EMBEDDING, rules.TOKENS, required=True),
        rules.Rule(f"{_VIT_BLOCK}.layernorm_before", schema.BLOCK_NORM_1, rules.NORM, required=True),
        *_attention(_VIT_BLOCK, ("attention.attention.query", "attention.attention.key", "attention.attention.value",
                                 "attention.output.dense"), ("qkv_bias", "qkv_bias", "qkv_bias", True),
                    (rules.HEADS_IN, rules.HEADS_IN, rules.HEADS_IN, rules.HEADS_OUT)),
        rules.Rule(f"{_VIT_BLOCK}.layernorm_after", schema.BLOCK_NORM_2, rules.NORM, required=True),
        rules.Rule(f"{_VIT_BLOCK}.intermediate.dense", schema.BLOCK_MLP_IN, rules.LINEAR, required=True),
        rules.Rule(f"{_VIT_BLOCK}.output.dense", schema.BLOCK_MLP_OUT, rules.LINEAR, required=True),
        rules.Rule("layernorm", schema.ENCODER_NORM, rules.NORM, required=True),
        # IJepaForImageClassification: a linear classifier on the mean of every token.
        rules.Rule("classifier", "head", rules.LINEAR),
    ), prefixes=("ijepa.",), ignored=("embeddings.mask_token",), refused=(
        ("pooler.", "IJepaModel's optional pooler (tanh(dense) of the first patch token: I-JEPA has no class token)"),
    )),
    # Not read: the dropouts (training only); pooler_act / pooler_output_size configure the pooler, refused when a
    # file has one.
)


# ---- AIMv2 (transformers models/aimv2: Aimv2VisionModel)

_AIMV2_BLOCK = "encoder.layers.{i}"
_AIMV2_HEAD = "attention-pooling head"
AIMV2 = Family(
    "aimv2_vision_model", "Aimv2VisionModel",
    # RMSNorm everywhere (right after the patch projection too), a SwiGLU MLP, no class token.
    fixed=dict(class_token=False, norm="rmsnorm", patch_norm="rmsnorm", mlp="swiglu", activation="gelu",
               patch_bias=True),
    keys=(
        *SIZES, image_size(224), INTERMEDIATE_SIZE,
        Key("hidden_act", str, "silu", values={"silu": {}}),
        layer_norm_eps(1e-5, name="rms_norm_eps"),
        Key("qkv_bias", bool, False, field="qkv_bias"),
        Key("mlp_bias", bool, False, field="mlp_bias"),
        # The native-resolution models add fixed 2-D sine-cosine embeddings ([sin, cos] of the column, then of the
        # row: vit_keras' sincos_2d) computed at each image's grid instead of a learned table.
        Key("is_native", bool, False, values={False: {"position_embedding": "learned_1d"},
                                              True: {"position_embedding": "sincos_2d"}}),
        Key("use_head", bool, True, values={True: {"global_pool": "map", "map_head": "aimv2"},
                                            False: {"global_pool": "avg"}}),
    ),
    # The vision tower inside a whole Aimv2Model: the other towers' tensors are not part of the image features
    # (the tower's pooler_output, before any projection).
    whole=WholeModel("aimv2", others=("text_model.", "text_projection.", "visual_projection.", "logit_scale")),
    table=rules.Table("Hugging Face aimv2_vision_model", (
        rules.Rule("embeddings.patch_embed", "embedding", rules.PATCH, required=True),
        rules.Rule("embeddings.rms_norm", "patch_norm", RMS_NORM, required=True),
        rules.Rule("embeddings.position_embedding", schema.POS_EMBEDDING, rules.tokens("weight", rank=2)),
        rules.Rule(f"{_AIMV2_BLOCK}.rms_norm1", schema.BLOCK_NORM_1, RMS_NORM, required=True),
        # Aimv2Attention's output projection has a bias exactly when q/k/v have theirs; vit_keras' always has one.
        *_attention(_AIMV2_BLOCK, ("attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.out_proj"),
                    ("qkv_bias",) * 4, (rules.HEADS_IN,) * 3 + (zero_bias(rules.HEADS_OUT),)),
        rules.Rule(f"{_AIMV2_BLOCK}.rms_norm2", schema.BLOCK_NORM_2, RMS_NORM, required=True),
        rules.Rule(f"{_AIMV2_BLOCK}.ffn.gate_proj", schema.BLOCK_MLP_GATE, rules.LINEAR, required=True,
                   bias="mlp_bias"),
        rules.Rule(f"{_AIMV2_BLOCK}.ffn.up_proj", schema.BLOCK_MLP_VALUE, rules.LINEAR, required=True,
                   bias="mlp_bias"),
        rules.Rule(f"{_AIMV2_BLOCK}.ffn.down_proj", schema.BLOCK_MLP_OUT, rules.LINEAR, required=True,
                   bias="mlp_bias"),
        rules.Rule("rms_norm", schema.ENCODER_NORM, RMS_NORM, required=True),
        # Aimv2AttentionPoolingHead: its learned token is the query as it is (`vit_keras.layers.AttentionPoolingHead`).
        rules.Rule("head.cls_token", f"{schema.MAP_HEAD}/probe", rules.TOKENS, part=_AIMV2_HEAD),
        rules.Rule("head.k_proj", f"{schema.MAP_ATTENTION}/key", rules.HEADS_IN, bias="qkv_bias", part=_AIMV2_HEAD),
        rules.Rule("head.v_proj", f"{schema.MAP_ATTENTION}/value", rules.HEADS_IN, bias="qkv_bias", part=_AIMV2_HEAD),
        rules.Rule("head.output_proj", f"{schema.MAP_ATTENTION}/out", rules.HEADS_OUT, part=_AIMV2_HEAD),
    ), prefixes=("vision_model.",)),
    # Not read: attention_dropout (training only).
)

# model_type -> its row: the one dispatch of `vit_keras.weights.hf`.
FAMILIES: dict[str, Family] = {family.model_type: family for family in (
    VIT, DINOV2, CLIP, SIGLIP, SIGLIP2, RADIO, DINOV3, IJEPA, AIMV2)}
# Whole image-text models read as their vision tower: model_type -> (the tower's model type, the other towers'
# tensor prefixes); and the ones refused (save the vision tower): model_type -> the tower's family.
WHOLE_MODELS = {family.whole.model_type: (family.model_type, family.whole.others) for family in FAMILIES.values()
                if family.whole is not None and family.whole.others is not None}
REFUSED_WHOLE_MODELS = {family.whole.model_type: family for family in FAMILIES.values()
                        if family.whole is not None and family.whole.others is None}
MODEL_TYPES = (*FAMILIES, *WHOLE_MODELS)
NAFLEX_MODEL_TYPES = tuple(kind for kind, family in FAMILIES.items() if family.naflex)
# The families whose rule table does not depend on the config (save_pretrained runs them backwards).
TABLES = {kind: family.table for kind, family in FAMILIES.items() if isinstance(family.table, rules.Table)}
