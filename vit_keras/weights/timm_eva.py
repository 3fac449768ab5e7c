"""Read timm's `Eva` models (timm 1.0.31 `eva.py`): EVA and EVA-02, DINOv3, Perception Encoder (PE core), RoPE-ViT
(axial and mixed, with or without absolute position embeddings) and timm's SBB RoPE ViTs, from the directories
timm's `save_for_hf` writes (config.json + model.safetensors; no torch needed).

`FAMILIES` maps each registered architecture name onto the `Eva` arguments its model function sets (a row per
family: the name's pattern, the family's shared arguments, its size words and its name options); config.json's
`model_args` override them, and `eva_fields` turns the result into `ViTConfig` fields, refusing by name every
argument whose value vit_keras does not implement. The state dict is read with a rule table (`table`) holding
exactly the modules those fields promise, each required, with the attention stored as the arguments choose:

- `EvaAttention` with `qkv_fused=True`: `attn.qkv.weight` without a bias, plus `attn.q_bias` and `attn.v_bias`;
- `EvaAttention` with `qkv_fused=False` (EVA-02 B/L): `attn.q_proj` and `attn.v_proj` with biases, `attn.k_proj`
  without;
- `AttentionRope` (`attn_type="rope"`: PE, RoPE-ViT): `attn.qkv` (or `q_proj`/`k_proj`/`v_proj`) with full biases.

`EvaAttention` has no key bias by architecture (its `k_bias` is a zero, non-persistent buffer), so the key bias is
read as zeros. That is exact, not invented: softmax is invariant to a key bias, which adds the same q·b_k to every
logit of a row. The RoPE tables are non-persistent buffers computed from the grid (not in the file); RoPE-Mixed's
learned `rope.freqs` is a parameter and is read.

Example:
    >>> architecture_args("vit_small_patch16_dinov3")["num_reg_tokens"]
    4
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping

import numpy as np

from vit_keras.weights import hf, json_config, rules, schema, timm, torch_layout
from vit_keras.weights.safetensors_io import read_safetensors

CONFIG_NAME = timm.CONFIG_NAME

# `Eva.__init__`'s defaults for every argument that changes the function it computes. `norm_eps` stands for the
# epsilon of `norm_layer` (a class, never in config.json): timm's LayerNorm has 1e-6; DINOv3 and PE pass
# `partial(LayerNorm, eps=1e-5)`.
EVA_DEFAULTS = {
    "img_size": 224, "patch_size": 16, "in_chans": 3, "global_pool": "avg", "embed_dim": 768, "depth": 12,
    "num_heads": 12, "num_kv_heads": None, "qkv_bias": True, "qkv_fused": True, "qk_norm": False, "mlp_ratio": 4.0,
    "swiglu_mlp": False, "swiglu_align_to": 0, "scale_mlp": False, "scale_attn_inner": False, "attn_type": "eva",
    "init_values": None, "attn_only_layer_scale": False, "class_token": True, "num_reg_tokens": 0,
    "no_embed_class": False, "use_abs_pos_emb": True, "use_rot_pos_emb": False, "rope_type": "cat",
    "rope_grid_offset": 0.0, "rope_grid_indexing": "ij", "rope_temperature": 10000.0, "rope_rotate_half": False,
    "rope_mrope_section": None, "use_post_norm": False, "use_pre_transformer_norm": False,
    "use_post_transformer_norm": None, "use_fc_norm": None, "attn_pool_num_heads": None,
    "attn_pool_mlp_ratio": None, "ref_feat_shape": None, "norm_eps": 1e-6,
}
# `Eva` arguments that leave an eval-mode forward pass unchanged: dropout and stochastic depth, initialisation,
# train-time RoPE coordinate augmentation, and the size handling a vit_keras model chooses itself (`image_size`).
INERT_ARGS = frozenset({
    "num_classes", "drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "attn_drop_rate",
    "drop_path_rate", "head_init_scale", "dynamic_img_size", "dynamic_img_pad", "rope_shift_coords",
    "rope_jitter_coords", "rope_rescale_coords",
})
# Arguments that must keep their default: each selects a part vit_keras does not implement.
UNSUPPORTED = (
    ("qk_norm", False, "a norm on q and k of each head"),
    ("scale_attn_inner", False, "a LayerNorm inside the attention (EVA-02 CLIP's sub-LN)"),
    ("use_post_norm", False, "post-norm blocks"),
    ("attn_only_layer_scale", False, "LayerScale on the attention branch only"),
    ("num_kv_heads", None, "grouped-query attention"),
    ("rope_mrope_section", None, "multimodal RoPE sections"),
    ("in_chans", 3, "input channels other than RGB"),
)
# (timm `rope_type`, `rope_rotate_half`) -> ViTConfig.rope (timm's `create_rope_embed`).
ROPE_TYPES = {("cat", False): "interleaved", ("dinov3", True): "rotate_half", ("mixed", False): "mixed"}
GLOBAL_POOLS = ("token", "avg", "map", "")


@dataclasses.dataclass(frozen=True)
class Family:
    """The architecture names of one family of timm model functions: `pattern` (groups `size`, `patch`, optional
    `options` (`_`-joined name tokens) and `res`), the `args` every function of the family sets, the size words'
    `sizes` and the name tokens' `options`.

    Example:
        >>> FAMILIES[0].name
        'DINOv3'
    """

    name: str
    pattern: str
    args: Mapping
    sizes: Mapping[str, Mapping]
    options: Mapping[str, Mapping] = dataclasses.field(default_factory=dict)


_EVA02_MIM = {"mlp_ratio": 4 * 2 / 3, "swiglu_mlp": True, "use_rot_pos_emb": True, "ref_feat_shape": (16, 16)}
_EVA02_SPLIT = {"qkv_fused": False, "scale_mlp": True}
_ROPE_VIT = {"attn_type": "rope", "qkv_bias": True, "init_values": 1e-5, "class_token": True, "global_pool": "token",
             "use_abs_pos_emb": False, "use_rot_pos_emb": True, "rope_grid_indexing": "xy", "rope_temperature": 100.0}
_PE_CORE = {"global_pool": "map", "attn_type": "rope", "use_pre_transformer_norm": True, "use_rot_pos_emb": True,
            "rope_grid_offset": 1.0, "rope_grid_indexing": "xy", "attn_pool_num_heads": 8, "attn_pool_mlp_ratio": 4.0,
            "norm_eps": 1e-5}
_DINOV3 = {"qkv_bias": False, "init_values": 1e-5, "rope_type": "dinov3", "rope_temperature": 100.0,
           "rope_rotate_half": True, "use_rot_pos_emb": True, "use_abs_pos_emb": False, "num_reg_tokens": 4,
           "use_fc_norm": False, "norm_eps": 1e-5}
_SWIGLU8 = {"swiglu_mlp": True, "swiglu_align_to": 8}


def _size(embed_dim, depth, num_heads, **args):
    return {"embed_dim": embed_dim, "depth": depth, "num_heads": num_heads, **args}


# Every family of `eva.py` model functions vit_keras reads, as the functions set them (timm 1.0.31). First match wins.
FAMILIES = (
    Family("DINOv3", r"vit_(?P<size>[a-z0-9_]+?)_patch(?P<patch>\d+)_dinov3(?P<options>(?:_qkvb)?)", _DINOV3, {
        "tiny": _size(192, 12, 3), "small": _size(384, 12, 6), "small_plus": _size(384, 12, 6, **_SWIGLU8),
        "base": _size(768, 12, 12), "large": _size(1024, 24, 16), "huge_plus": _size(1280, 32, 20, **_SWIGLU8),
        "7b": _size(4096, 40, 32, mlp_ratio=2, swiglu_mlp=True, swiglu_align_to=64),
    }, {"qkvb": {"qkv_bias": True}}),
    Family("EVA-02", r"eva02_(?P<size>[a-z]+)_patch(?P<patch>\d+)(?P<options>(?:_clip)?)_(?P<res>\d+)", _EVA02_MIM, {
        "tiny": _size(192, 12, 3), "small": _size(384, 12, 6), "base": _size(768, 12, 12, **_EVA02_SPLIT),
        "large": _size(1024, 24, 16, **_EVA02_SPLIT),
    }, {"clip": {"scale_attn_inner": True, "global_pool": "token"}}),
    Family("EVA", r"eva_(?P<size>giant)_patch(?P<patch>\d+)(?P<options>(?:_clip)?)_(?P<res>\d+)", {},
           {"giant": _size(1408, 40, 16, mlp_ratio=6144 / 1408)}, {"clip": {"global_pool": "token"}}),
    Family("Perception Encoder", r"vit_pe_core_(?P<size>[a-z]+)_patch(?P<patch>\d+)_(?P<res>\d+)", _PE_CORE, {
        "tiny": _size(192, 12, 3, ref_feat_shape=(24, 24)), "small": _size(384, 12, 6, ref_feat_shape=(24, 24)),
        "base": _size(768, 12, 12, ref_feat_shape=(14, 14)), "large": _size(1024, 24, 16, ref_feat_shape=(24, 24)),
        "gigantic": _size(1536, 50, 16, mlp_ratio=8960 / 1536, class_token=False, ref_feat_shape=(32, 32),
                          rope_grid_offset=0.0),
    }),
    Family("RoPE-ViT", r"vit_(?P<size>small|base|large)_patch(?P<patch>\d+)_rope(?P<options>(?:_mixed)?(?:_ape)?)_"
           r"(?P<res>\d+)", _ROPE_VIT, {"small": _size(384, 12, 6), "base": _size(768, 12, 12),
                                        "large": _size(1024, 24, 16)},
           {"mixed": {"rope_type": "mixed", "rope_temperature": 10.0},
            "ape": {"use_abs_pos_emb": True, "no_embed_class": True}}),
    Family("SBB RoPE ViT", r"vit_(?P<size>[a-z]+)_patch(?P<patch>\d+)_rope(?P<options>_reg\d+_gap)_(?P<res>\d+)",
           {"qkv_fused": True, "init_values": 1e-5, "class_token": False, "use_rot_pos_emb": True,
            "use_abs_pos_emb": False, "ref_feat_shape": (16, 16)}, {
               "medium": _size(512, 12, 8), "mediumd": _size(512, 20, 8, qkv_bias=False),
               "betwixt": _size(640, 12, 10), "base": _size(768, 12, 12),
           }, {"reg1": {"num_reg_tokens": 1}, "reg4": {"num_reg_tokens": 4}, "gap": {}}),
)


def _find(name):
    for family in FAMILIES:
        found = re.fullmatch(family.pattern, name)
        if found:
            return family, found.groupdict()
    return None, None


def knows(name) -> bool:
    """Whether `name` is an `Eva` architecture name this module reads (else timm's ViT reader is asked).

    Example:
        >>> knows("eva02_base_patch14_224"), knows("vit_base_patch16_224")
        (True, False)
    """
    return isinstance(name, str) and _find(name)[0] is not None


def architecture_args(name: str, path: str = CONFIG_NAME) -> dict:
    """The `Eva` arguments timm's model function `name` sets, over `Eva`'s defaults (`EVA_DEFAULTS`).

    Example:
        >>> architecture_args("eva02_base_patch14_224")["qkv_fused"]
        False
    """
    family, groups = _find(name) if isinstance(name, str) else (None, None)
    if family is None:
        raise ValueError(f"{path!r}: {name!r} is not a timm Eva architecture vit_keras knows (families: "
                         f"{[f.name for f in FAMILIES]}).")
    if groups["size"] not in family.sizes:
        raise ValueError(f"{path!r}: timm architecture {name!r}: {family.name} has no size {groups['size']!r} that "
                         f"vit_keras knows ({sorted(family.sizes)}).")
    args = {**EVA_DEFAULTS, **family.args, **family.sizes[groups["size"]], "patch_size": int(groups["patch"])}
    if groups.get("res"):
        args["img_size"] = int(groups["res"])
    for token in [t for t in (groups.get("options") or "").split("_") if t]:
        if token not in family.options:
            raise ValueError(f"{path!r}: timm architecture {name!r} has the part {token!r}, which vit_keras does not "
                             f"implement for {family.name} (known: {sorted(family.options)}).")
        args.update(family.options[token])
    return args


def _pair(value, key, where) -> tuple[int, int]:
    return json_config.size_pair({key: list(value) if isinstance(value, tuple) else value}, key, where)


def _model_args(config: dict, args: dict, path: str) -> dict:
    """`args` with config.json's `model_args`, its `global_pool` and the image size timm builds at."""
    model_args = json_config.require(config, "model_args", dict, path, default={})
    accepted = (set(EVA_DEFAULTS) - {"norm_eps"}) | INERT_ARGS
    unknown = sorted(set(model_args) - accepted)
    if unknown:
        raise ValueError(f"{path!r}: model_args {unknown} are not timm Eva options vit_keras implements.")
    args = {**args, **{k: v for k, v in model_args.items() if k not in INERT_ARGS}}
    if "global_pool" not in model_args and config.get("global_pool") is not None:
        args["global_pool"] = json_config.require(config, "global_pool", str, path)  # the saved model's own
    cfg = json_config.require(config, "pretrained_cfg", dict, path, default={})
    if "img_size" not in model_args and cfg.get("fixed_input_size") and isinstance(cfg.get("input_size"), list):
        # timm's builder passes a fixed-size pretrained config's input size as img_size.
        args["img_size"] = _pair(cfg["input_size"][1:], "input_size", f"{path} pretrained_cfg")
    return args


def eva_fields(args: Mapping, where: str = CONFIG_NAME) -> tuple[dict, tuple[str, bool]]:
    """`Eva` arguments -> (`ViTConfig` fields, the attention's storage `(attn_type, qkv_fused)`); an argument whose
    value selects a part vit_keras does not implement is refused by name.

    Example:
        >>> fields, attention = eva_fields(architecture_args("vit_pe_core_tiny_patch16_384"))
        >>> fields["rope"], fields["map_num_heads"], attention
        ('interleaved', 8, ('rope', True))
    """
    for key, default, what in UNSUPPORTED:
        if args.get(key, default) != default:
            raise ValueError(f"{where}: {key}={args[key]!r} selects {what}, which vit_keras does not implement.")

    def value(key, kind, positive=False):
        return json_config.require(args, key, kind, where, default=None, positive=positive)

    embed_dim, num_heads = value("embed_dim", int, True), value("num_heads", int, True)
    mlp_ratio = float(value("mlp_ratio", float, True))
    patch = _pair(args["patch_size"], "patch_size", where)
    if patch[0] != patch[1]:
        raise ValueError(f"{where}: patch_size {list(patch)} is not square; vit_keras patches are square.")
    hidden = int(embed_dim * mlp_ratio)  # timm: int(dim * mlp_ratio)
    fields = {
        "image_size": _pair(args["img_size"], "img_size", where), "patch_size": patch[0], "hidden_size": embed_dim,
        "num_layers": value("depth", int, True), "num_heads": num_heads, "activation": "gelu",
        "layer_norm_epsilon": float(args["norm_eps"]), "qkv_bias": value("qkv_bias", bool),
        "layer_scale": args["init_values"] is not None, "class_token": value("class_token", bool),
        "num_register_tokens": value("num_reg_tokens", int), "pre_norm": value("use_pre_transformer_norm", bool),
    }
    fields["patch_bias"] = not fields["pre_norm"]  # timm: PatchEmbed(bias=not use_pre_transformer_norm)
    if value("swiglu_mlp", bool):
        align = value("swiglu_align_to", int)
        split = bool(value("scale_mlp", bool) or align)  # timm's SwiGLU (fc1_g/fc1_x), else packed GluMlp (fc1)
        hidden += -hidden % align if align else 0
        fields.update(mlp="swiglu" if split else "swiglu_packed",
                      mlp_norm="layernorm" if value("scale_mlp", bool) else None)
    elif value("scale_mlp", bool):
        raise ValueError(f"{where}: scale_mlp=True on a GELU MLP (a LayerNorm inside it), which vit_keras does not "
                         "implement.")
    fields["mlp_dim"] = hidden
    if value("use_abs_pos_emb", bool):
        fields.update(position_embedding="learned_1d", no_embed_class=value("no_embed_class", bool))
    else:
        fields["position_embedding"] = "none"
    if value("use_rot_pos_emb", bool):
        kind = (value("rope_type", str), bool(value("rope_rotate_half", bool)))
        if kind not in ROPE_TYPES:
            raise ValueError(f"{where}: rope_type={kind[0]!r} with rope_rotate_half={kind[1]} is a RoPE vit_keras "
                             f"does not implement (known: {sorted(ROPE_TYPES)}).")
        fields.update(rope=ROPE_TYPES[kind], rope_temperature=float(value("rope_temperature", float, True)),
                      rope_grid_indexing=value("rope_grid_indexing", str))
        # timm's create_rope_embed: only 'cat' takes ref_feat_shape, 'cat' and 'dinov3' take grid_offset.
        if kind[0] in ("cat", "dinov3"):
            fields["rope_grid_offset"] = float(value("rope_grid_offset", float))
        if kind[0] == "cat" and args["ref_feat_shape"] is not None:
            fields["rope_ref_grid_size"] = _pair(args["ref_feat_shape"], "ref_feat_shape", where)
    attn_type = value("attn_type", str)
    if attn_type not in ("eva", "rope"):
        raise ValueError(f"{where}: attn_type {attn_type!r} is not 'eva' or 'rope'.")
    global_pool = value("global_pool", str)
    if global_pool not in GLOBAL_POOLS:
        raise ValueError(f"{where}: global_pool {global_pool!r} is not one of {GLOBAL_POOLS} (vit_keras pools "
                         "with a token, the mean of the patches or attention pooling).")
    # timm: fc_norm defaults to "the pooling is an average", the final norm to "no fc_norm".
    fc_norm = args["use_fc_norm"] if args["use_fc_norm"] is not None else global_pool == "avg"
    final_norm = args["use_post_transformer_norm"] if args["use_post_transformer_norm"] is not None else not fc_norm
    if bool(fc_norm) == bool(final_norm):
        raise ValueError(f"{where}: use_fc_norm={bool(fc_norm)} with use_post_transformer_norm={bool(final_norm)}: "
                         "vit_keras models normalise either every token or the pooled vector, exactly once.")
    # timm's '' keeps every token (no pooled vector): a headless model returns them; the head slot takes a default.
    fields.update(fc_norm=bool(fc_norm), global_pool=global_pool or ("token" if fields["class_token"] else "avg"))
    if global_pool == "map":
        map_heads = value("attn_pool_num_heads", int, True) or num_heads
        map_mlp = int(embed_dim * float(value("attn_pool_mlp_ratio", float, True) or mlp_ratio))
        fields.update(map_num_heads=None if map_heads == num_heads else map_heads,
                      map_mlp_dim=None if map_mlp == hidden else map_mlp)
    return fields, (attn_type, bool(value("qkv_fused", bool)))


# ---- the state dict


def _k_zero(target, weight, bias, num_heads):
    """The q projection (`q_proj` or `q_bias` alone) and, beside its bias, EvaAttention's zero key bias."""
    out = (torch_layout.heads_in(f"{target}/query", weight, bias, num_heads) if weight is not None
           else {f"{target}/query/bias": np.asarray(bias, np.float32).reshape(num_heads, -1)})
    if f"{target}/query/bias" in out:
        # Exact: softmax ignores a key bias (it adds q·b_k to every logit of a row).
        out[f"{target}/key/bias"] = np.zeros_like(out[f"{target}/query/bias"])
    return out


Q_PROJ = rules.Transform(_k_zero, ("query/kernel", "query/bias", "key/bias"))
Q_BIAS = rules.Transform(lambda target, weight, bias, num_heads: _k_zero(target, None, weight, num_heads),
                         ("query/bias", "key/bias"), weight="", bias=None)
V_BIAS = rules.Transform(
    lambda target, weight, bias, num_heads: {target: np.asarray(weight, np.float32).reshape(num_heads, -1)},
    ("",), weight="", bias=None)
QKV_WEIGHT = rules.fused("query", "key", "value", bias=None)
HEADS_IN_NO_BIAS = dataclasses.replace(rules.HEADS_IN, outputs=("kernel",), bias=None)
# A learned array stored as it is (RoPE-Mixed's frequencies, (2, depth, heads, head_dim / 2)).
AS_IS = rules.Transform(lambda target, weight, bias, num_heads: {target: np.asarray(weight, np.float32)}, ("",),
                        weight="", bias=None)

_ATTENTION = schema.BLOCK_ATTENTION
# The attention's rules by (attn_type, qkv_fused); rules marked "qkv_bias" are there only with qkv_bias=True.
ATTENTION_RULES = {
    ("eva", True): (
        (None, rules.Rule("blocks.{i}.attn.qkv", _ATTENTION, QKV_WEIGHT, required=True)),
        ("qkv_bias", rules.Rule("blocks.{i}.attn.q_bias", _ATTENTION, Q_BIAS, required=True)),
        ("qkv_bias", rules.Rule("blocks.{i}.attn.v_bias", f"{_ATTENTION}/value/bias", V_BIAS, required=True)),
    ),
    ("eva", False): (
        (None, rules.Rule("blocks.{i}.attn.q_proj", _ATTENTION, Q_PROJ, required=True, bias="qkv_bias")),
        (None, rules.Rule("blocks.{i}.attn.k_proj", f"{_ATTENTION}/key", HEADS_IN_NO_BIAS, required=True)),
        (None, rules.Rule("blocks.{i}.attn.v_proj", f"{_ATTENTION}/value", rules.HEADS_IN, required=True,
                          bias="qkv_bias")),
    ),
    ("rope", True): (
        (None, rules.Rule("blocks.{i}.attn.qkv", _ATTENTION, rules.fused("query", "key", "value"), required=True,
                          bias="qkv_bias")),
    ),
    ("rope", False): tuple(
        (None, rules.Rule(f"blocks.{{i}}.attn.{p}_proj", f"{_ATTENTION}/{name}", rules.HEADS_IN, required=True,
                          bias="qkv_bias")) for p, name in (("q", "query"), ("k", "key"), ("v", "value"))),
}
# The MLP's rules by ViTConfig.mlp.
MLP_RULES = {
    "gelu": (rules.Rule("blocks.{i}.mlp.fc1", schema.BLOCK_MLP_IN, rules.LINEAR, required=True),),
    "swiglu_packed": (rules.Rule("blocks.{i}.mlp.fc1", schema.BLOCK_MLP_IN, rules.LINEAR, required=True),),
    "swiglu": (rules.Rule("blocks.{i}.mlp.fc1_g", schema.BLOCK_MLP_GATE, rules.LINEAR, required=True),
               rules.Rule("blocks.{i}.mlp.fc1_x", schema.BLOCK_MLP_VALUE, rules.LINEAR, required=True)),
}


def _always(fields):
    return True


def _field(name, value=True):
    return lambda fields: fields.get(name) == value


# (when, rule): every rule is required where `when(fields)` holds and absent (so its tensors are refused as unknown)
# where it does not. The attention's and the MLP's input rules come from the tables above.
RULES: tuple[tuple[Callable, rules.Rule], ...] = (
    (_always, rules.Rule("patch_embed.proj", "embedding", rules.PATCH, required=True, bias="patch_bias")),
    (_field("class_token"), rules.Rule("cls_token", "cls", rules.TOKENS, required=True)),
    (lambda f: f["num_register_tokens"] > 0, rules.Rule("reg_token", "reg", rules.TOKENS, required=True)),
    (_field("position_embedding", "learned_1d"),
     rules.Rule("pos_embed", schema.POS_EMBEDDING, rules.TOKENS, required=True)),
    (_field("rope", "mixed"), rules.Rule("rope.freqs", schema.ROPE_FREQS, AS_IS, required=True)),
    (_field("pre_norm"), rules.Rule("norm_pre", "pre_norm", rules.NORM, required=True)),
    (_always, rules.Rule("blocks.{i}.norm1", schema.BLOCK_NORM_1, rules.NORM, required=True)),
    (_always, rules.Rule("blocks.{i}.attn.proj", f"{_ATTENTION}/out", rules.HEADS_OUT, required=True)),
    (_field("layer_scale"), rules.Rule("blocks.{i}.gamma_1", schema.BLOCK_SCALE_1, rules.scale(""), required=True)),
    (_always, rules.Rule("blocks.{i}.norm2", schema.BLOCK_NORM_2, rules.NORM, required=True)),
    (lambda f: f.get("mlp_norm") is not None,
     rules.Rule("blocks.{i}.mlp.norm", schema.BLOCK_MLP_NORM, rules.NORM, required=True)),
    (_always, rules.Rule("blocks.{i}.mlp.fc2", schema.BLOCK_MLP_OUT, rules.LINEAR, required=True)),
    (_field("layer_scale"), rules.Rule("blocks.{i}.gamma_2", schema.BLOCK_SCALE_2, rules.scale(""), required=True)),
    (_field("fc_norm", False), rules.Rule("norm", schema.ENCODER_NORM, rules.NORM, required=True)),
    (_field("fc_norm"), rules.Rule("fc_norm", "fc_norm", rules.NORM, required=True)),
    (_always, rules.Rule("head", "head", rules.LINEAR)),
)


def _map_rules(heads: int) -> tuple[rules.Rule, ...]:
    """timm `AttentionPoolLatent` (`attn_pool`) as the MAP head, its projections split into its own `heads`."""

    def with_heads(transform):
        return dataclasses.replace(transform, convert=lambda target, weight, bias, _: transform.convert(
            target, weight, bias, heads))

    part = {"required": True}
    return (
        rules.Rule("attn_pool.latent", f"{schema.MAP_HEAD}/probe", rules.TOKENS, **part),
        rules.Rule("attn_pool.q", f"{schema.MAP_ATTENTION}/query", with_heads(rules.HEADS_IN), **part),
        rules.Rule("attn_pool.kv", schema.MAP_ATTENTION, with_heads(rules.fused("key", "value")), **part),
        rules.Rule("attn_pool.proj", f"{schema.MAP_ATTENTION}/out", with_heads(rules.HEADS_OUT), **part),
        rules.Rule("attn_pool.norm", schema.MAP_NORM, rules.NORM, **part),
        rules.Rule("attn_pool.mlp.fc1", schema.MAP_MLP_IN, rules.LINEAR, **part),
        rules.Rule("attn_pool.mlp.fc2", schema.MAP_MLP_OUT, rules.LINEAR, **part),
    )


def table(fields: Mapping, attention: tuple[str, bool], family: str = "timm Eva") -> rules.Table:
    """The rule table of the state dict an `Eva` with these `ViTConfig` fields and attention storage holds; errors
    call it `family` (the architecture's name, so that "every ... model has it" says which).

    Example:
        >>> fields, attention = eva_fields(architecture_args("eva02_base_patch14_224"))
        >>> [rule.source for rule in table(fields, attention).rules][-3:]
        ['blocks.{i}.mlp.fc2', 'fc_norm', 'head']
    """
    selected = [rule for when, rule in RULES if when(fields)]
    attention_rules = [rule for switch, rule in ATTENTION_RULES[attention] if switch is None or fields[switch]]
    at = [rule.source for rule in selected].index("blocks.{i}.attn.proj")
    selected[at:at] = attention_rules
    at = [rule.source for rule in selected].index("blocks.{i}.norm2") + 1
    selected[at:at] = MLP_RULES[fields.get("mlp", "gelu")]
    if fields["global_pool"] == "map":
        selected.extend(_map_rules(fields.get("map_num_heads") or fields["num_heads"]))
    return rules.Table(family, tuple(selected))


def _check_counts(tensors, fields: Mapping, source: str) -> None:
    """Tensors whose shape the config fixes and the file could contradict without an unknown or missing key: the
    registers and RoPE-Mixed's frequencies; refused with the key and both shapes."""
    head_dim = fields["hidden_size"] // fields["num_heads"]
    expected = {
        "reg_token": ((1, fields["num_register_tokens"], fields["hidden_size"]),
                      f"{fields['num_register_tokens']} registers"),
        "rope.freqs": ((2, fields["num_layers"], fields["num_heads"], head_dim // 2),
                       f"(2, depth {fields['num_layers']}, heads {fields['num_heads']}, head width {head_dim} / 2)"),
    }
    for key, (shape, why) in expected.items():
        if key in tensors and tuple(tensors[key].shape) != shape:
            raise ValueError(f"{source}: {key} has shape {tuple(tensors[key].shape)} but the config ({why}) needs "
                             f"{shape}; nothing was loaded. Check that config.json and the weights describe the same "
                             "model.")


def canonicalize(tensors, fields: Mapping, attention: tuple[str, bool], *, source: str | None = None,
                 family: str = "timm Eva") -> dict:
    """An `Eva` state dict -> the canonical dict, by `table(fields, attention)`; every tensor the config promises
    and the file lacks, or the file holds and the config does not promise, is refused by its timm key.

    Example:
        >>> args = dict(architecture_args("vit_small_patch16_dinov3"), embed_dim=48, depth=3, num_heads=3, patch_size=8)
        >>> fields, attention = eva_fields(args)
        >>> dinov3 = "tests/fixtures/family2/timm_dinov3/checkpoint"
        >>> params = canonicalize(read_safetensors(f"{dinov3}/model.safetensors"), fields, attention)
        >>> params["cls"].shape
        (1, 1, 48)
    """
    source = rules.source_name(tensors, source)
    _check_counts(tensors, fields, source)
    return rules.apply_table(table(fields, attention, family), tensors, num_heads=fields["num_heads"], source=source,
                             switches=rules.config_switches(fields), fields=fields)


def read_directory(directory: str) -> tuple[dict, tuple | None, dict]:
    """A timm `save_for_hf` directory of an `Eva` -> (ViTConfig fields, (mean, std) or None, canonical dict).

    Example:
        >>> dinov3 = "tests/fixtures/family2/timm_dinov3/checkpoint"  # a tiny DINOv3
        >>> fields, normalization, params = read_directory(dinov3)
        >>> fields["rope"], fields["num_register_tokens"], params["cls"].shape
        ('rotate_half', 4, (1, 1, 48))
    """
    path = os.path.join(directory, CONFIG_NAME)
    config = json_config.load(path)
    name = json_config.require(config, "architecture", str, path)
    args = _model_args(config, architecture_args(name, path), path)
    fields, attention = eva_fields(args, f"{path!r} ({name})")
    tensors = read_safetensors(hf.weights_file(directory))
    params = canonicalize(tensors, fields, attention, family=f"timm {name}")
    return fields, timm.pretrained_normalization(config, path), params
