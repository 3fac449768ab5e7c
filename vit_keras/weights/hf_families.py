"""transformers' 2025-26 vision towers as data: DINOv3 (`dinov3_vit`: `DINOv3ViTModel`), I-JEPA (`ijepa`:
`IJepaModel`, `IJepaForImageClassification`) and AIMv2 (`aimv2_vision_model`: `Aimv2VisionModel`, or the vision
tower of a whole `aimv2` `Aimv2Model`).

Each model type is a `Family`: the `ViTConfig` fields every model of the type has, the config.json keys that set the
others (`Key`: a key's value copied to a field, or mapped onto fields by a table of the values transformers
builds, any other value refused by name) and its rule table (see `vit_keras.weights.rules`) over the names
`save_pretrained` writes (transformers 5.23.0).

Biases absent by architecture are read as zeros only where that is exactly the same function and vit_keras' part
has the bias anyway: DINOv3's key projection (softmax is invariant to a key bias, which adds the same q·b_k to every
logit of a row), and a projection whose config says it has no bias while vit_keras' part has one (a q or v beside
the others' biases, an output projection, a plain MLP: a zero bias adds nothing). A bias the config says is there
and the file lacks is refused (`rules`' `bias` switches).

Example:
    >>> architecture({"model_type": "ijepa", "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3,
    ...               "intermediate_size": 96, "patch_size": 8}, "config.json")["global_pool"]
    'avg'
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping

import numpy as np

from vit_keras.weights import json_config, rules, schema, torch_layout

_REQUIRED = json_config._MISSING
# hidden_act values of a plain MLP -> ViTConfig.activation (transformers' "gelu" is the exact erf form).
GELU_ACTS = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
             "gelu_fast": "gelu_tanh", "quick_gelu": "quick_gelu"}
# hidden_act of a gated MLP: down(act(gate(x)) * up(x)) with SiLU is SwiGLU, the one gated MLP vit_keras has.
_SWIGLU = {"silu": {"mlp": "swiglu", "activation": "gelu"}, "swish": {"mlp": "swiglu", "activation": "gelu"}}
_PLAIN_MLP = {act: {"mlp": "gelu", "activation": value} for act, value in GELU_ACTS.items()}


@dataclasses.dataclass(frozen=True)
class Key:
    """One config.json key: its JSON type, transformers' default when absent, and what it sets: `field` (the value
    copied to that `ViTConfig` field), or `values` (each value transformers builds -> the fields it means; any
    other value is refused, naming the key and the values vit_keras runs).

    Example:
        >>> Key("use_head", bool, True, values={True: {"global_pool": "map"}}).read({}, "config.json")
        {'global_pool': 'map'}
    """

    name: str
    kind: type | tuple
    default: object = _REQUIRED
    field: str | None = None
    values: Mapping | None = None
    positive: bool = False

    def read(self, config: dict, file: str) -> dict:
        value = json_config.require(config, self.name, self.kind, file, default=self.default, positive=self.positive)
        if self.values is None:
            return {} if self.field is None else {self.field: value}
        if value not in self.values:
            raise ValueError(f"{file!r}: {self.name!r} is {value!r}; vit_keras runs this model type with "
                             f"{self.name} in {sorted(self.values, key=str)}.")
        return dict(self.values[value])


_SIZES = (
    Key("hidden_size", int, field="hidden_size", positive=True),
    Key("num_hidden_layers", int, field="num_layers", positive=True),
    Key("num_attention_heads", int, field="num_heads", positive=True),
    Key("intermediate_size", int, field="mlp_dim", positive=True),
    Key("patch_size", int, field="patch_size", positive=True),
    Key("num_channels", int, 3, values={3: {}}),  # vit_keras checkpoints take RGB
)


@dataclasses.dataclass(frozen=True)
class Family:
    """A transformers model type: `fixed` fields, the `keys` that set the others, the `bias_keys` (config.json keys
    with transformers' defaults) that say whether a projection has a bias (the table's bias switches), and
    `table(fields)` its rule table for the model those fields describe.

    The config.json keys not named here change nothing in eval mode (dropout, stochastic depth, initial values,
    training-time augmentations; each family says which), so vit_keras computes what transformers computes.

    Example:
        >>> FAMILIES["ijepa"].classes
        'IJepaModel, IJepaForImageClassification'
    """

    classes: str
    fixed: Mapping
    keys: tuple[Key, ...]
    table: Callable[[dict], rules.Table]
    bias_keys: tuple[tuple[str, bool], ...] = ()

    def fields(self, config: dict, file: str) -> dict:
        fields = dict(self.fixed)
        fields["image_size"] = json_config.size_pair(config, "image_size", file, default=224)
        for key in (*_SIZES, *self.keys):
            fields.update(key.read(config, file))
        return fields

    def switches(self, config: dict, file: str, fields: Mapping) -> dict[str, bool]:
        """The bias switches of the table: the `ViTConfig` ones and the per-projection keys of config.json."""
        out = rules.config_switches(fields, names=("qkv_bias", "patch_bias", "mlp_bias"))
        out.update({key: json_config.require(config, key, bool, file, default=default)
                    for key, default in self.bias_keys})
        return out


# ---- the transforms these tables add: RMSNorm weights, DINOv3's register tokens, biases absent by architecture

RMS_NORM = rules.Transform(lambda target, weight, bias, num_heads: torch_layout.norm(target, weight), ("scale",),
                           bias=None, inverse=lambda target, params, num_heads: torch_layout.norm_back(target, params))


def _registers(target, weight, bias, num_heads):
    # DINOv3ViTEmbeddings always has a `register_tokens` parameter; without registers it is (1, 0, D).
    return {} if weight.ndim == 3 and weight.shape[1] == 0 else torch_layout.tokens(target, weight)


REGISTERS = dataclasses.replace(rules.TOKENS, convert=_registers)


def zero_bias(transform: rules.Transform) -> rules.Transform:
    """`transform` reading a module without a bias as one with an all-zero bias (the same function), for the
    vit_keras parts that always have that bias; the rule's `bias` switch still refuses a missing bias the config
    says is there.

    Example:
        >>> sorted(zero_bias(rules.LINEAR).convert("head", np.ones((3, 2)), None, 1))
        ['head/bias', 'head/kernel']
    """

    def convert(target, weight, bias, num_heads):
        if bias is None:
            bias = np.zeros(weight.shape[0], np.float32)
        return transform.convert(target, weight, bias, num_heads)

    return dataclasses.replace(transform, convert=convert)


def _attention(block: str, names: tuple[str, str, str, str], biases: tuple, transforms: tuple) -> tuple:
    """q, k, v and output projection rules of one attention module."""
    targets = [f"{schema.BLOCK_ATTENTION}/{part}" for part in schema.PROJECTIONS]
    return tuple(rules.Rule(f"{block}.{name}", target, transform, required=True, bias=bias)
                 for name, target, bias, transform in zip(names, targets, biases, transforms))


# ---- DINOv3 (transformers models/dinov3_vit: DINOv3ViTModel)

_DINOV3_BLOCK = "layer.{i}"


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


def _dinov3_fields_table(fields: Mapping) -> rules.Table:
    return _dinov3_table(fields["mlp"] != "gelu", fields["qkv_bias"], fields["_mlp_bias"])


DINOV3 = Family(
    classes="DINOv3ViTModel",
    # pooler_output is the class token after the final LayerNorm; RoPE replaces absolute position embeddings.
    fixed=dict(class_token=True, global_pool="token", position_embedding="none", rope="rotate_half", layer_scale=True,
               patch_bias=True, qkv_bias=True, mlp_bias=True),
    keys=(
        Key("layer_norm_eps", float, 1e-5, field="layer_norm_epsilon", positive=True),
        Key("rope_theta", float, 100.0, field="rope_temperature", positive=True),
        Key("num_register_tokens", int, 0, field="num_register_tokens"),
    ),
    table=_dinov3_fields_table,
    bias_keys=(("query_bias", True), ("key_bias", False), ("value_bias", True), ("proj_bias", True),
               ("mlp_bias", True)),
    # Not read: the RoPE coordinate augmentations pos_embed_shift / _jitter / _rescale run in training mode only
    # (`if self.training`), as do drop_path_rate and attention_dropout; layerscale_value is LayerScale's initial
    # value (the file holds the trained scales); apply_layernorm, reshape_hidden_states, out_features / out_indices
    # configure DINOv3ViTBackbone's feature maps, not DINOv3ViTModel.
)


def _dinov3_fields(config: dict, file: str) -> dict:
    gated = json_config.require(config, "use_gated_mlp", bool, file, default=False)
    act = json_config.require(config, "hidden_act", str, file, default="gelu")
    choices = _SWIGLU if gated else _PLAIN_MLP
    if act not in choices:
        raise ValueError(f"{file!r}: hidden_act {act!r} with use_gated_mlp={gated}; vit_keras runs "
                         f"{'a gated MLP with' if gated else 'a plain MLP with'} hidden_act in {sorted(choices)}.")
    mlp_bias = json_config.require(config, "mlp_bias", bool, file, default=True)
    biases = [json_config.require(config, key, bool, file, default=default) for key, default in DINOV3.bias_keys[:3]]
    # A gated MLP (SwiGLU) may drop its biases; the plain MLP keeps them in vit_keras, read as zeros.
    return {**choices[act], "qkv_bias": any(biases), "mlp_bias": mlp_bias if gated else True, "_mlp_bias": mlp_bias}


# ---- I-JEPA (transformers models/ijepa: the ViT layout without a class token)

_VIT_BLOCK = "encoder.layer.{i}"
IJEPA_TABLE = rules.Table("Hugging Face ijepa", (
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
))

IJEPA = Family(
    classes="IJepaModel, IJepaForImageClassification",
    # No class token: the classifier (and pooling="avg") reads the mean of the tokens after the final LayerNorm.
    fixed=dict(class_token=False, global_pool="avg", position_embedding="learned_1d", patch_bias=True),
    keys=(
        Key("hidden_act", str, "gelu", values={act: {"activation": value} for act, value in GELU_ACTS.items()}),
        Key("layer_norm_eps", float, 1e-12, field="layer_norm_epsilon", positive=True),
        Key("qkv_bias", bool, True, field="qkv_bias"),
    ),
    table=lambda fields: IJEPA_TABLE,
    # Not read: the dropouts (training only); pooler_act / pooler_output_size configure the pooler, refused when a
    # file has one.
)


# ---- AIMv2 (transformers models/aimv2: Aimv2VisionModel)

_AIMV2_BLOCK = "encoder.layers.{i}"
_AIMV2_HEAD = "attention-pooling head"
AIMV2_TABLE = rules.Table("Hugging Face aimv2_vision_model", (
    rules.Rule("embeddings.patch_embed", "embedding", rules.PATCH, required=True),
    rules.Rule("embeddings.rms_norm", "patch_norm", RMS_NORM, required=True),
    rules.Rule("embeddings.position_embedding", schema.POS_EMBEDDING, rules.tokens("weight", rank=2)),
    rules.Rule(f"{_AIMV2_BLOCK}.rms_norm1", schema.BLOCK_NORM_1, RMS_NORM, required=True),
    # Aimv2Attention's output projection has a bias exactly when q/k/v have theirs; vit_keras' always has one.
    *_attention(_AIMV2_BLOCK, ("attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.out_proj"),
                ("qkv_bias",) * 4, (rules.HEADS_IN,) * 3 + (zero_bias(rules.HEADS_OUT),)),
    rules.Rule(f"{_AIMV2_BLOCK}.rms_norm2", schema.BLOCK_NORM_2, RMS_NORM, required=True),
    rules.Rule(f"{_AIMV2_BLOCK}.ffn.gate_proj", schema.BLOCK_MLP_GATE, rules.LINEAR, required=True, bias="mlp_bias"),
    rules.Rule(f"{_AIMV2_BLOCK}.ffn.up_proj", schema.BLOCK_MLP_VALUE, rules.LINEAR, required=True, bias="mlp_bias"),
    rules.Rule(f"{_AIMV2_BLOCK}.ffn.down_proj", schema.BLOCK_MLP_OUT, rules.LINEAR, required=True, bias="mlp_bias"),
    rules.Rule("rms_norm", schema.ENCODER_NORM, RMS_NORM, required=True),
    # Aimv2AttentionPoolingHead: its learned token is the query as it is (`vit_keras.layers.AttentionPoolingHead`).
    rules.Rule("head.cls_token", f"{schema.MAP_HEAD}/probe", rules.TOKENS, part=_AIMV2_HEAD),
    rules.Rule("head.k_proj", f"{schema.MAP_ATTENTION}/key", rules.HEADS_IN, bias="qkv_bias", part=_AIMV2_HEAD),
    rules.Rule("head.v_proj", f"{schema.MAP_ATTENTION}/value", rules.HEADS_IN, bias="qkv_bias", part=_AIMV2_HEAD),
    rules.Rule("head.output_proj", f"{schema.MAP_ATTENTION}/out", rules.HEADS_OUT, part=_AIMV2_HEAD),
), prefixes=("vision_model.",))  # the vision tower inside a whole Aimv2Model (see `vision_tower`)

AIMV2 = Family(
    classes="Aimv2VisionModel",
    # RMSNorm everywhere (right after the patch projection too), a SwiGLU MLP, no class token.
    fixed=dict(class_token=False, norm="rmsnorm", patch_norm="rmsnorm", mlp="swiglu", activation="gelu",
               patch_bias=True),
    keys=(
        Key("hidden_act", str, "silu", values={"silu": {}}),
        Key("rms_norm_eps", float, 1e-5, field="layer_norm_epsilon", positive=True),
        Key("qkv_bias", bool, False, field="qkv_bias"),
        Key("mlp_bias", bool, False, field="mlp_bias"),
        # The native-resolution models add fixed 2-D sine-cosine embeddings ([sin, cos] of the column, then of the
        # row: vit_keras' sincos_2d) computed at each image's grid instead of a learned table.
        Key("is_native", bool, False, values={False: {"position_embedding": "learned_1d"},
                                              True: {"position_embedding": "sincos_2d"}}),
        Key("use_head", bool, True, values={True: {"global_pool": "map", "map_head": "aimv2"},
                                            False: {"global_pool": "avg"}}),
    ),
    table=lambda fields: AIMV2_TABLE,
    # Not read: attention_dropout (training only).
)

FAMILIES: dict[str, Family] = {"dinov3_vit": DINOV3, "ijepa": IJEPA, "aimv2_vision_model": AIMV2}
# Whole image-text models whose vision tower is one of FAMILIES: the tower's model type, and the other towers' tensors
# (not part of the image features vit_keras computes: the tower's pooler_output, before any projection).
WHOLE_MODELS = {"aimv2": ("aimv2_vision_model", ("text_model.", "text_projection.", "visual_projection.",
                                                   "logit_scale"))}
MODEL_TYPES = (*FAMILIES, *WHOLE_MODELS)


def vision_tower(config: dict, file: str) -> dict:
    """The config of the vision tower a config.json describes: itself, or a whole model's `vision_config`.

    Example:
        >>> vision_tower({"model_type": "aimv2", "vision_config": {"hidden_size": 48}}, "c")["model_type"]
        'aimv2_vision_model'
    """
    if config["model_type"] not in WHOLE_MODELS:
        return config
    vision = json_config.require(config, "vision_config", dict, file)
    return {**vision, "model_type": WHOLE_MODELS[config["model_type"]][0]}
_EXTRA_FIELDS = {"dinov3_vit": _dinov3_fields}


def architecture(config: dict, file: str) -> dict:
    """The `ViTConfig` fields of a config.json whose `model_type` is one of `MODEL_TYPES` (`file` names it in
    errors).

    Example:
        >>> architecture({"model_type": "aimv2_vision_model", "hidden_size": 48, "num_hidden_layers": 2,
        ...               "num_attention_heads": 3, "intermediate_size": 96, "patch_size": 8, "image_size": 32},
        ...              "config.json")["map_head"]
        'aimv2'
    """
    config = vision_tower(config, file)
    model_type = config["model_type"]
    fields = FAMILIES[model_type].fields(config, file)
    if model_type in _EXTRA_FIELDS:
        fields.update(_EXTRA_FIELDS[model_type](config, file))
    fields.pop("_mlp_bias", None)
    return fields


def table_and_switches(config: dict, file: str) -> tuple[rules.Table, dict[str, bool]]:
    """The rule table and bias switches that read the tensors of the model `config` describes.

    Example:
        >>> table, switches = table_and_switches({"model_type": "dinov3_vit", "hidden_size": 48,
        ...     "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 96, "patch_size": 8}, "c")
        >>> switches["key_bias"], table.family
        (False, 'Hugging Face dinov3_vit')
    """
    config = vision_tower(config, file)
    family = FAMILIES[config["model_type"]]
    fields = family.fields(config, file)
    fields.update(_EXTRA_FIELDS.get(config["model_type"], lambda c, f: {})(config, file))
    switches = family.switches(config, file, fields)
    return family.table(fields), switches


def canonicalize(tensors, config: dict, source: str, file: str) -> dict[str, np.ndarray]:
    """The canonical arrays of `tensors` (read from `source`) for the model config.json (`file`) describes; a
    tensor the config rules out, one it needs and the file lacks, or registers of another count are refused by
    their transformers key.

    Example:
        >>> from vit_keras.weights.safetensors_io import read_safetensors
        >>> directory = "tests/fixtures/family2/hf_ijepa/checkpoint"  # a tiny I-JEPA
        >>> config = json_config.load(f"{directory}/config.json")
        >>> params = canonicalize(read_safetensors(f"{directory}/model.safetensors"), config,
        ...                       f"{directory}/model.safetensors", f"{directory}/config.json")
        >>> params["Transformer/encoder_norm/scale"].shape
        (48,)
    """
    others = WHOLE_MODELS.get(config["model_type"], ("", ()))[1]
    tensors = {key: value for key, value in tensors.items() if not key.startswith(others)}
    fields = architecture(config, file)
    table, switches = table_and_switches(config, file)
    params = rules.apply_table(table, tensors, num_heads=fields["num_heads"], source=source, switches=switches,
                               fields=fields)
    registers, expected = (params["reg"].shape[1] if "reg" in params else 0), fields.get("num_register_tokens", 0)
    if registers != expected:
        found = [key for key in tensors if key.endswith("register_tokens")]
        what = f"{found[0]} has shape {tuple(tensors[found[0]].shape)}" if found else "the file has no register tokens"
        raise ValueError(f"{source}: {what}, but {file!r} says num_register_tokens={expected} (shape (1, {expected}, "
                         f"{fields['hidden_size']})); nothing was loaded. Check that the file and its config describe "
                         "the same model.")
    return params
