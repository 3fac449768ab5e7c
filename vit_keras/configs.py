"""The architecture of a Vision Transformer (`ViTConfig`) and the paper's variants (and the AugReg hybrids) as rows.

This module is the only place an architecture fact is written; nothing else lives here so that every other module
can import it.

Example:
    >>> from vit_keras.configs import VARIANTS
    >>> VARIANTS["B/16"].hidden_size
    768
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class ResNetConfig:
    """The ResNet (BiT-style) stem of a hybrid: bottleneck units per stage and a width multiplier.

    Example:
        >>> ResNetConfig(num_layers=(3, 4, 9)).width
        64
    """

    num_layers: tuple[int, ...] = ()
    width_factor: int = 1

    @property
    def width(self) -> int:
        return int(64 * self.width_factor)

    @classmethod
    def from_any(cls, value: ResNetConfig | Mapping | None) -> ResNetConfig | None:
        """Accept a `ResNetConfig`, a dict such as `{"num_layers": [3, 4, 9], "width_factor": 1}`, or None.

        Example:
            >>> ResNetConfig.from_any({"num_layers": [2, 2], "width_factor": 1}).num_layers
            (2, 2)
        """
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"num_layers", "width_factor"}
            if unknown:
                raise ValueError(
                    f"`resnet` has unknown keys {sorted(unknown)}; pass "
                    "{'num_layers': [3, 4, 9], 'width_factor': 1} or a vit_keras.configs.ResNetConfig."
                )
            num_layers = value.get("num_layers", ())
            if not isinstance(num_layers, Sequence) or not all(
                isinstance(n, int) and n >= 1 for n in num_layers
            ):
                raise ValueError(
                    f"`resnet['num_layers']` must be a list of positive unit counts per stage, got {num_layers!r}."
                )
            width_factor = value.get("width_factor", 1)
            if not isinstance(width_factor, int) or width_factor < 1:
                raise ValueError(f"`resnet['width_factor']` must be a positive int, got {width_factor!r}.")
            return cls(num_layers=tuple(num_layers), width_factor=width_factor)
        raise ValueError(
            f"`resnet` must be None, a dict like {{'num_layers': [3, 4, 9], 'width_factor': 1}} or a "
            f"ResNetConfig, got {type(value).__name__}."
        )

    def to_dict(self) -> dict:
        return {"num_layers": list(self.num_layers), "width_factor": self.width_factor}


ACTIVATIONS = ("gelu_tanh", "gelu", "quick_gelu")
POOLS = ("token", "avg", "map")
POSITION_EMBEDDINGS = ("learned_1d", "learned_2d", "sincos_2d", "none")
POS_INTERPOLATIONS = ("linear", "bicubic", "bicubic_antialias", "bilinear_antialias", "bilinear_crop")
# A mode whose stored table is part of the architecture: kept at `pos_grid` and resampled in the graph to every
# image's grid, even for a fixed image size (RADIO's cropped position embeddings).
ARCHITECTURAL_POS_INTERPOLATIONS = ("bilinear_crop",)
# The block's parts (`vit_keras.layers`): its MLP, its norms, and a 2-D RoPE layout on q and k.
MLPS = ("gelu", "swiglu", "swiglu_packed")
NORMS = ("layernorm", "rmsnorm")
ROPE_LAYOUTS = ("interleaved", "rotate_half", "mixed")
ROPE_GRID_INDEXING = ("ij", "xy")
# The attention-pooling heads `global_pool="map"` may be: big_vision's MAPHead (q/k/v/out projections, then
# `+ MLP(LN)`; timm `AttentionPoolLatent`, SigLIP) or AIMv2's (the learned token is the query as it is; key, value
# and output projections only).
MAP_HEADS = ("big_vision", "aimv2")
DEFAULT_IMAGE_SIZE = 224


def check_positive_int(name, value, *, allow_none=False, allow_zero=False):
    if value is None and allow_none:
        return None
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        kind = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"`{name}` must be {kind} integer, got {value!r}.")
    return int(value)


def _check_rate(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a float in [0, 1), got {value!r}.")
    return float(value)


def _check_epsilon(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0.0 < eps < 1.0:
        raise ValueError(f"`layer_norm_epsilon` must be a float in (0, 1), e.g. 1e-6, got {eps!r}.")
    return float(eps)


def check_hw(name, value):
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value, value)
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1 for v in value)
    ):
        raise ValueError(f"`{name}` must be an int or a (height, width) pair of positive ints, got {value!r}.")
    return (int(value[0]), int(value[1]))


def prefix_token_count(class_token: bool, num_class_tokens: int, distilled: bool, num_register_tokens: int) -> int:
    """Tokens in front of the patches, in timm's order: the class tokens, DeiT's distillation token, the registers.

    Example:
        >>> prefix_token_count(True, 1, False, 4)  # DINOv2 with registers
        5
    """
    return int(num_class_tokens) * int(class_token) + int(distilled) + int(num_register_tokens)


def embedded_prefix_count(position_embedding: str, no_embed_class: bool, num_prefix_tokens: int) -> int:
    """Prefix tokens with a row in the position-embedding table: all of them in a learned 1-D table that embeds
    them (timm's default), none otherwise.

    Example:
        >>> embedded_prefix_count("learned_1d", False, 5), embedded_prefix_count("learned_1d", True, 5)
        (5, 0)
    """
    return 0 if no_embed_class or position_embedding != "learned_1d" else int(num_prefix_tokens)


def resnet_stride(resnet) -> int:
    """Image pixels one position of a hybrid's ResNet feature map spans (1 without a stem): the root's 4, then 2 per
    stage after the first.

    Example:
        >>> resnet_stride(None), resnet_stride({"num_layers": [3, 4, 9]})
        (1, 16)
    """
    resnet = ResNetConfig.from_any(resnet)
    return 1 if resnet is None else 4 * 2 ** max(len(resnet.num_layers) - 1, 0)


def check_image_sides(image_size: tuple[int, int], patch_size: int, resnet) -> int:
    """The model's stride (`patch_size`, times a hybrid stem's), once both image sides are checked to be multiples
    of it.

    Example:
        >>> check_image_sides((32, 48), 8, None)
        8
        >>> check_image_sides((32, 50), 8, None)
        Traceback (most recent call last):
        ...
        ValueError: Image width 50 is not divisible by patch_size 8; use 48 or 56 instead.
    """
    stride = patch_size * resnet_stride(resnet)
    for dim, size in zip(("height", "width"), image_size):
        if size % stride:
            what = (f"patch_size {patch_size}" if resnet is None else
                    f"the hybrid's total stride {stride} (ResNet stem stride x patch_size)")
            lower, upper = (size // stride) * stride, (size // stride + 1) * stride
            raise ValueError(f"Image {dim} {size} is not divisible by {what}; use {lower or upper} or {upper} instead.")
    return stride


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """The fields one encoder block reads, which `vit_keras.layers.TransformerBlock` takes whole: the attention
    (heads, q/k/v biases, a 2-D RoPE layout and the prefix tokens it leaves unrotated), the MLP (its kind, width,
    activation, hidden norm and biases), the norms and LayerScale, and dropout. `ViTConfig.block` is a model's; the
    fields are validated here, once, for both.

    Example:
        >>> BlockConfig(num_heads=3, mlp_dim=96, mlp="swiglu", norm="rmsnorm").mlp
        'swiglu'
        >>> BlockConfig(num_heads=3, mlp_dim=96, mlp_norm="layernorm")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `mlp_norm` and `mlp_bias=False` apply to the SwiGLU MLPs only; ...
    """

    num_heads: int
    mlp_dim: int
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    layer_norm_epsilon: float = 1e-6
    activation: str = "gelu_tanh"
    layer_scale: bool = False
    qkv_bias: bool = True
    mlp: str = "gelu"
    mlp_norm: str | None = None
    mlp_bias: bool = True
    norm: str = "layernorm"
    rope: str | None = None
    num_prefix_tokens: int = 1

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "num_heads", check_positive_int("num_heads", self.num_heads))
        set_(self, "mlp_dim", check_positive_int("mlp_dim", self.mlp_dim))
        set_(self, "num_prefix_tokens", check_positive_int("num_prefix_tokens", self.num_prefix_tokens,
                                                           allow_zero=True))
        set_(self, "dropout_rate", _check_rate("dropout_rate", self.dropout_rate))
        set_(self, "attention_dropout_rate", _check_rate("attention_dropout_rate", self.attention_dropout_rate))
        set_(self, "layer_norm_epsilon", _check_epsilon(self.layer_norm_epsilon))
        for field in ("layer_scale", "qkv_bias", "mlp_bias"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"`{field}` must be True or False, got {getattr(self, field)!r}.")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"`activation` must be one of {ACTIVATIONS}, got {self.activation!r}.")
        if self.mlp not in MLPS:
            raise ValueError(f"`mlp` must be one of {MLPS}, got {self.mlp!r}.")
        if self.mlp_norm is not None and self.mlp_norm not in NORMS:
            raise ValueError(f"`mlp_norm` must be None or one of {NORMS}, got {self.mlp_norm!r}.")
        if self.mlp == "gelu" and (self.mlp_norm is not None or not self.mlp_bias):
            raise ValueError("`mlp_norm` and `mlp_bias=False` apply to the SwiGLU MLPs only; pass mlp='swiglu' or "
                             "'swiglu_packed', or leave them at None and True.")
        if self.norm not in NORMS:
            raise ValueError(f"`norm` must be one of {NORMS}, got {self.norm!r}.")
        if self.rope is not None and self.rope not in ROPE_LAYOUTS:
            raise ValueError(f"`rope` must be None or one of {ROPE_LAYOUTS}, got {self.rope!r}.")

    @classmethod
    def from_arguments(cls, arguments: Mapping) -> BlockConfig:
        """A block's config from keyword arguments in either vocabulary (`gelu_approximate` is the older name of
        `activation`: `translate_aliases`), e.g. a layer's config in a `.keras` file saved by 0.1.0.

        Example:
            >>> BlockConfig.from_arguments({"num_heads": 2, "mlp_dim": 8, "gelu_approximate": False}).activation
            'gelu'
        """
        fields = translate_aliases(arguments)
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"Unknown block arguments {unknown}; the fields of a block are "
                            f"{[f.name for f in dataclasses.fields(cls)]}.")
        if fields.get("activation") is None:
            fields.pop("activation", None)
        return cls(**fields)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PatchConfig:
    """The fields the patch embedding reads, which `vit_keras.layers.PatchEncoder` takes whole: the projection (its
    width, patch size and bias, and a norm after it), the prefix tokens (class tokens, DeiT's distillation token,
    registers), the position embeddings (their kind, the grid the table is stored at, how it is resampled to
    another grid, whether the prefix tokens have rows in it) and the dropout after them. `ViTConfig.patch` is a
    model's; the fields are validated here, once, for both.

    Example:
        >>> PatchConfig(hidden_size=48, grid_size=(4, 4), num_register_tokens=4).num_prefix_tokens
        5
        >>> PatchConfig(hidden_size=48, grid_size=(4, 4), class_token=False, distilled=True)
        Traceback (most recent call last):
        ...
        ValueError: `distilled=True` (a DeiT distillation token) needs class_token=True.
    """

    hidden_size: int
    grid_size: tuple[int, int]
    patch_size: int | None = None
    patch_bias: bool = True
    patch_norm: str | None = None
    layer_norm_epsilon: float = 1e-6
    class_token: bool = True
    num_class_tokens: int = 1
    distilled: bool = False
    num_register_tokens: int = 0
    position_embedding: str = "learned_1d"
    no_embed_class: bool = False
    pos_interpolation: str = "linear"
    dropout_rate: float = 0.0

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "hidden_size", check_positive_int("hidden_size", self.hidden_size))
        set_(self, "grid_size", check_hw("grid_size", self.grid_size))
        set_(self, "patch_size", check_positive_int("patch_size", self.patch_size, allow_none=True))
        for field in ("patch_bias", "class_token", "distilled", "no_embed_class"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"`{field}` must be True or False, got {getattr(self, field)!r}.")
        if self.patch_norm is not None and self.patch_norm not in NORMS:
            raise ValueError(f"`patch_norm` must be None or one of {NORMS}, got {self.patch_norm!r}.")
        set_(self, "layer_norm_epsilon", _check_epsilon(self.layer_norm_epsilon))
        set_(self, "num_register_tokens", check_positive_int(
            "num_register_tokens", self.num_register_tokens, allow_zero=True))
        if self.distilled and not self.class_token:
            raise ValueError("`distilled=True` (a DeiT distillation token) needs class_token=True.")
        set_(self, "num_class_tokens", check_positive_int("num_class_tokens", self.num_class_tokens))
        if self.num_class_tokens != 1 and (not self.class_token or self.distilled):
            raise ValueError(f"`num_class_tokens` {self.num_class_tokens} needs class_token=True and no distillation "
                             "token; pass class_token=True, distilled=False, or num_class_tokens=1.")
        if self.position_embedding not in POSITION_EMBEDDINGS:
            raise ValueError(
                f"`position_embedding` must be one of {POSITION_EMBEDDINGS}, got {self.position_embedding!r}."
            )
        if self.position_embedding == "learned_2d" and self.hidden_size % 2:
            raise ValueError(f"position_embedding='learned_2d' needs an even hidden_size, got {self.hidden_size}.")
        if self.num_prefix_tokens and self.position_embedding != "learned_1d" and self.no_embed_class:
            raise ValueError("`no_embed_class` applies to position_embedding='learned_1d' only.")
        if self.pos_interpolation not in POS_INTERPOLATIONS:
            raise ValueError(
                f"`pos_interpolation` must be one of {POS_INTERPOLATIONS}, got {self.pos_interpolation!r}."
            )
        if self.pos_interpolation in ARCHITECTURAL_POS_INTERPOLATIONS and (
                self.position_embedding != "learned_1d" or not self.no_embed_class):
            raise ValueError(f"pos_interpolation={self.pos_interpolation!r} resizes a learned table of patch "
                             "positions only; it needs position_embedding='learned_1d' and no_embed_class=True.")
        set_(self, "dropout_rate", _check_rate("dropout_rate", self.dropout_rate))

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens in front of the patches: class tokens, distillation, registers (in that order)."""
        return prefix_token_count(self.class_token, self.num_class_tokens, self.distilled, self.num_register_tokens)

    @property
    def num_embedded_prefix_tokens(self) -> int:
        """Prefix tokens that have a row in the position-embedding table."""
        return embedded_prefix_count(self.position_embedding, self.no_embed_class, self.num_prefix_tokens)

    @classmethod
    def from_arguments(cls, arguments: Mapping) -> PatchConfig:
        """A patch embedding's config from keyword arguments in either vocabulary: the layer's older names
        (`norm_epsilon` for `layer_norm_epsilon`; `classifier`, in the layer configs of files saved by 0.1.0, whose
        `"token"` means a class token: `translate_aliases`).

        Example:
            >>> PatchConfig.from_arguments({"hidden_size": 8, "grid_size": [2, 2], "classifier": "gap"}).class_token
            False
        """
        fields = dict(arguments)
        if "norm_epsilon" in fields:
            fields["layer_norm_epsilon"] = fields.pop("norm_epsilon")
        if "classifier" in fields:
            fields["class_token"] = translate_aliases({"classifier": fields.pop("classifier")})["class_token"]
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(fields) - set(names))
        if unknown:
            raise TypeError(f"Unknown patch embedding arguments {unknown}; its fields are {names}.")
        return cls(**fields)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "grid_size": list(self.grid_size)}


@dataclasses.dataclass(frozen=True)
class PoolingHeadConfig:
    """The fields an attention-pooling head reads, which `vit_keras.layers.MAPHead` and `AttentionPoolingHead`
    take whole: its kind (`MAP_HEADS`), heads, MLP width, norm epsilon and activation (big_vision's MAPHead) and the
    key/value bias (AIMv2's). `ViTConfig.pooling_head` is a model's; the fields are validated here, once.

    Example:
        >>> PoolingHeadConfig(num_heads=2, mlp_dim=16).kind
        'big_vision'
        >>> PoolingHeadConfig(num_heads=2, mlp_dim=16, activation="relu")
        Traceback (most recent call last):
        ...
        ValueError: `activation` must be one of ('gelu_tanh', 'gelu', 'quick_gelu'), got 'relu'.
    """

    num_heads: int
    mlp_dim: int | None = None
    kind: str = "big_vision"
    layer_norm_epsilon: float = 1e-6
    activation: str = "gelu_tanh"
    qkv_bias: bool = False

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "num_heads", check_positive_int("num_heads", self.num_heads))
        set_(self, "mlp_dim", check_positive_int("mlp_dim", self.mlp_dim, allow_none=True))
        if self.kind not in MAP_HEADS:
            raise ValueError(f"`map_head` must be one of {MAP_HEADS}, got {self.kind!r}.")
        if self.kind == "big_vision" and self.mlp_dim is None:
            raise ValueError("big_vision's MAPHead needs `mlp_dim`, the width of its MLP.")
        set_(self, "layer_norm_epsilon", _check_epsilon(self.layer_norm_epsilon))
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"`activation` must be one of {ACTIVATIONS}, got {self.activation!r}.")
        if not isinstance(self.qkv_bias, bool):
            raise ValueError(f"`qkv_bias` must be True or False, got {self.qkv_bias!r}.")

    @classmethod
    def from_arguments(cls, arguments: Mapping, kind: str) -> PoolingHeadConfig:
        """A head's config from a layer's keyword arguments (the layer on its own, or its config in a `.keras`
        file); `kind` is the layer's."""
        fields = dict(arguments)
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"Unknown pooling-head arguments {unknown}; its fields are "
                            f"{[f.name for f in dataclasses.fields(cls) if f.name != 'kind']}.")
        return cls(**fields, kind=kind)


def whole_or_keywords(config_class, whole, keywords: dict, *, argument: str, names=None, make=None, **given):
    """The config a layer reads: given whole (`whole`: the config itself, or the dict of it that the layer's saved
    config holds) or made from keyword arguments, never both. Every layer that takes a sub-config (`BlockConfig`,
    `PatchConfig`, `PoolingHeadConfig`) takes it this one way, so that a layer built on its own, one built by
    `build_vit` and one read from a `.keras` file (whose flat keywords and older names stay readable) all hold one
    validated config.

    `whole` is the layer's `argument` (e.g. `block`). The config's fields (or `names`, when the layer takes fewer as
    keywords) are taken out of `keywords` (the layer's
    `**kwargs`, which keeps the Keras Layer's own arguments); `given` are the layer's positional fields, counted when
    not None. `make` turns the keywords into the config (default: `config_class.from_arguments`, which knows the
    older names).

    Example:
        >>> kwargs = {"num_heads": 2, "mlp_dim": 8, "name": "block"}
        >>> whole_or_keywords(BlockConfig, None, kwargs, argument="block").mlp_dim, kwargs
        (8, {'name': 'block'})
        >>> whole_or_keywords(BlockConfig, {"num_heads": 2, "mlp_dim": 8}, {}, argument="block").num_heads
        2
        >>> whole_or_keywords(BlockConfig, BlockConfig(num_heads=2, mlp_dim=8), {"num_heads": 2}, argument="block")
        Traceback (most recent call last):
        ...
        TypeError: Pass a BlockConfig either as `block=` or as keywords, not both (got ['num_heads'] beside block=).
    """
    names = set(names if names is not None else (f.name for f in dataclasses.fields(config_class)))
    fields = {name: keywords.pop(name) for name in list(keywords) if name in names}
    fields.update({name: value for name, value in given.items() if value is not None})
    if whole is None:
        return (make or config_class.from_arguments)(fields)
    if fields:
        raise TypeError(f"Pass a {config_class.__name__} either as `{argument}=` or as keywords, not both (got "
                        f"{sorted(fields)} beside {argument}=).")
    if isinstance(whole, Mapping):  # a layer config saved by `get_config`
        return config_class(**whole)
    if not isinstance(whole, config_class):
        raise TypeError(f"`{argument}` must be a {config_class.__name__} (or its dict), got {type(whole).__name__}.")
    return whole


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """The architecture of a Vision Transformer: every fact the builder and the checkpoint readers need.

    This dataclass is the only place an architecture fact is written. It is validated once, when it is made
    (`ValueError` naming the field and the fix), carried by every model (its layers' configs), produced by every
    checkpoint reader and consumed by one builder (`vit_keras.models.build_vit`). The paper's variants are rows of
    it (`VARIANTS`); the family's switches (LayerScale, registers, ...) are its fields:

    - `class_token`: a learned class token in front of the patches; `distilled`: a DeiT distillation token
      after it, with a second head averaged with the first at inference; `num_register_tokens`: DINOv2 registers.
    - `no_embed_class`: position embeddings cover the patches only (the prefix tokens are joined after they are
      added); otherwise the table has one row per prefix token as well.
    - `pre_norm`: a LayerNorm after the position embeddings (CLIP's `ln_pre`, timm `norm_pre`).
    - `layer_scale`: a learned per-channel scale on each residual branch (DINOv2, timm `init_values`).
    - `activation`: `"gelu_tanh"` (Google), `"gelu"` (exact erf: timm, most of transformers), `"quick_gelu"`
      (OpenAI CLIP, x·sigmoid(1.702x)); `layer_norm_epsilon`: the source's (1e-6 Google/timm, 1e-5 CLIP, 1e-12
      transformers ViT).
    - `global_pool`: what the head reads: `"token"` (class token), `"avg"` (mean of the patch tokens) or `"map"`
      (attention pooling with a learned probe: big_vision `MAPHead`, timm `attn_pool`, SigLIP's `head`);
      `map_num_heads` / `map_mlp_dim`: that head's own heads and MLP width where they differ from the blocks' (timm
      `attn_pool_num_heads` / `attn_pool_mlp_ratio`, e.g. Perception Encoder's 8 heads); None: the blocks' values.
    - `fc_norm`: the final LayerNorm is applied after pooling instead of over every token (timm `fc_norm`, CLIP's
      `post_layernorm`); `qkv_bias` / `patch_bias`: whether those projections have biases (without them the model
      has no such variables, and a checkpoint must agree: a missing bias is refused, never read as zero).
    - The block's parts: `mlp` (`"gelu"`: the paper's MLP with `activation`; `"swiglu"` with split gate/value
      kernels, `"swiglu_packed"` with one packed kernel), `mlp_norm` (a norm on a SwiGLU's hidden layer: EVA-02's
      sub-LN) and `mlp_bias=False` (a SwiGLU without biases: AIMv2); `norm` (`"layernorm"` or `"rmsnorm"`, for
      every norm of the encoder: the blocks', `pre_norm`, `encoder_norm` and `fc_norm`).
    - `rope`: a 2-D rotary position embedding on q and k of the patch tokens (`vit_keras.layers.rope`):
      `"interleaved"` (EVA-02, PE, RoPE-ViT axial, timm SBB), `"rotate_half"` (DINOv3) or `"mixed"` (RoPE-Mixed's
      learned frequencies). `rope_temperature` (None: the layout's θ), `rope_grid_offset` (PE: 1),
      `rope_ref_grid_size` (EVA-02 / PE / SBB: positions rescaled to the training grid) and `rope_grid_indexing`
      (`"ij"` or `"xy"`). It combines with any `position_embedding` (`"none"` for DINOv3 and RoPE-Mixed).
    - `patch_norm` (None, `"layernorm"`, `"rmsnorm"`): a norm on each patch right after the patch projection, before
      the position embeddings are added (AIMv2's RMSNorm), with `layer_norm_epsilon`.
    - `map_head`: which attention-pooling head `global_pool="map"` is (`MAP_HEADS`): `"big_vision"` (MAPHead, timm
      `AttentionPoolLatent`, SigLIP's `head`) or `"aimv2"` (transformers `Aimv2AttentionPoolingHead`).
    - `image_size=None`: the model takes any image size divisible by the patch size (by the total stride for
      hybrids) at call time. Its position embeddings are stored at `pos_grid` (default: the 224x224 grid; a
      checkpoint's own grid when loaded with one) and resampled inside the graph to each call's grid with
      `pos_interpolation`: `"linear"` (vit_jax's corner-aligned zoom), `"bicubic"` (transformers') or
      `"bicubic_antialias"` (timm's). With a fixed `image_size`, `pos_grid` is None: the table is at the model's grid.
    - RADIO's parts: `num_class_tokens` (several class tokens in front of the registers; `"token"` pooling reads
      all of them, concatenated: RADIO's summary), `pos_interpolation="bilinear_crop"` (the stored `pos_grid` table,
      which is part of the architecture, resized bilinearly to a square of the longer side of each image's grid and
      cropped to it, in the graph, also for a fixed `image_size`), `input_normalization` (`(mean, std)` per channel,
      applied to the [0, 1] images inside the model: RADIO's input conditioner) and `final_norm=False` (no norm
      after the blocks: neither `encoder_norm` nor `fc_norm`, timm's `final_norm=False`).

    Example:
        >>> VARIANTS["L/16"].num_layers
        24
        >>> ViTConfig(patch_size=14, hidden_size=48, num_heads=3, num_layers=2, mlp_dim=192,
        ...           layer_scale=True, num_register_tokens=4, no_embed_class=True).num_prefix_tokens
        5
    """

    name: str = "custom"
    patch_size: int = 16
    hidden_size: int = 768
    mlp_dim: int = 3072
    num_heads: int = 12
    num_layers: int = 12
    resnet: ResNetConfig | None = None
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    image_size: tuple[int, int] | None = (DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE)
    class_token: bool = True
    distilled: bool = False
    num_register_tokens: int = 0
    no_embed_class: bool = False
    position_embedding: str = "learned_1d"
    pre_norm: bool = False
    layer_scale: bool = False
    activation: str = "gelu_tanh"
    layer_norm_epsilon: float = 1e-6
    qkv_bias: bool = True
    patch_bias: bool = True
    global_pool: str = "token"
    map_num_heads: int | None = None
    map_mlp_dim: int | None = None
    fc_norm: bool = False
    representation_size: int | None = None
    pos_grid: tuple[int, int] | None = None
    pos_interpolation: str = "linear"
    mlp: str = "gelu"
    mlp_norm: str | None = None
    mlp_bias: bool = True
    norm: str = "layernorm"
    rope: str | None = None
    rope_temperature: float | None = None
    rope_grid_offset: float = 0.0
    rope_ref_grid_size: tuple[int, int] | None = None
    rope_grid_indexing: str = "ij"
    patch_norm: str | None = None
    map_head: str = "big_vision"
    num_class_tokens: int = 1
    final_norm: bool = True
    input_normalization: tuple[tuple[float, ...], tuple[float, ...]] | None = None

    def __post_init__(self):
        set_ = object.__setattr__
        for field in ("patch_size", "hidden_size", "mlp_dim", "num_heads", "num_layers", "num_class_tokens"):
            set_(self, field, check_positive_int(field, getattr(self, field)))
        set_(self, "num_register_tokens", check_positive_int("num_register_tokens", self.num_register_tokens,
                                                             allow_zero=True))
        for field in ("representation_size", "map_num_heads", "map_mlp_dim"):
            set_(self, field, check_positive_int(field, getattr(self, field), allow_none=True))
        set_(self, "dropout_rate", _check_rate("dropout_rate", self.dropout_rate))
        set_(self, "attention_dropout_rate", _check_rate("attention_dropout_rate", self.attention_dropout_rate))
        if self.image_size is not None:
            set_(self, "image_size", check_hw("image_size", self.image_size))
        set_(self, "resnet", ResNetConfig.from_any(self.resnet))
        # The block's own switches (layer_scale, qkv_bias, mlp_bias) are checked by `BlockConfig`, the patch
        # embedding's (class_token, distilled, no_embed_class, patch_bias) by `PatchConfig`.
        for field in ("pre_norm", "fc_norm", "final_norm"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"`{field}` must be True or False, got {getattr(self, field)!r}.")
        if self.hidden_size % self.num_heads:
            divisors = [h for h in range(1, self.hidden_size + 1) if self.hidden_size % h == 0 and h <= 64]
            raise ValueError(
                f"`hidden_size` {self.hidden_size} is not divisible by `num_heads` {self.num_heads}; pick num_heads "
                f"from {divisors} or change hidden_size."
            )
        self._check_grid()
        # The parts' own configs, made (and their fields validated) once, here: what the layers take whole.
        set_(self, "_patch", PatchConfig(**{field.name: getattr(self, field.name)
                                            for field in dataclasses.fields(PatchConfig)}))
        set_(self, "_block", BlockConfig(**{field.name: getattr(self, field.name) for field in
                                            dataclasses.fields(BlockConfig) if field.name != "num_prefix_tokens"},
                                         num_prefix_tokens=self.num_prefix_tokens))
        self._check_parts()
        self._check_radio_parts()
        if self.global_pool not in POOLS:
            raise ValueError(f"`global_pool` must be one of {POOLS}, got {self.global_pool!r}.")
        if self.map_num_heads is not None and self.hidden_size % self.map_num_heads:
            raise ValueError(f"`hidden_size` {self.hidden_size} is not divisible by `map_num_heads` "
                             f"{self.map_num_heads}; pick a divisor of hidden_size, or None for num_heads.")
        if self.map_head not in MAP_HEADS:
            raise ValueError(f"`map_head` must be one of {MAP_HEADS}, got {self.map_head!r}.")
        if self.map_head != "big_vision" and self.global_pool != "map":
            raise ValueError(f"`map_head={self.map_head!r}` describes an attention-pooling head, but global_pool is "
                             f"{self.global_pool!r}; pass global_pool='map', or leave map_head at 'big_vision'.")
        set_(self, "layer_norm_epsilon", _check_epsilon(self.layer_norm_epsilon))
        if self.global_pool == "token" and not self.class_token:
            raise ValueError("global_pool='token' needs a class token; use global_pool='avg' or 'map', or "
                             "class_token=True.")
        if self.distilled and self.global_pool != "token":
            raise ValueError("`distilled=True` reads the class and distillation tokens; use global_pool='token'.")
        set_(self, "_pooling_head", self._make_pooling_head())

    def _check_grid(self):
        """The grid the position table is stored at (`pos_grid`: kept for a model of any size and for a table that
        is part of the architecture), and image sides that the patches (and a hybrid's stem) divide."""
        set_ = object.__setattr__
        stride = self.feature_stride * self.patch_size
        if self.image_size is None:
            grid = self.pos_grid if self.pos_grid is not None else (DEFAULT_IMAGE_SIZE // stride,) * 2
            set_(self, "pos_grid", check_hw("pos_grid", grid))
            return
        if self.pos_interpolation in ARCHITECTURAL_POS_INTERPOLATIONS:
            # The stored table is part of the architecture: kept at its own grid, resampled in the graph.
            grid = self.pos_grid if self.pos_grid is not None else tuple(s // stride for s in self.image_size)
            set_(self, "pos_grid", check_hw("pos_grid", grid))
        else:
            set_(self, "pos_grid", None)  # a fixed-size model stores its position embeddings at its own grid
        check_image_sides(self.image_size, self.patch_size, self.resnet)

    def _check_parts(self):
        set_ = object.__setattr__
        if self.rope_grid_indexing not in ROPE_GRID_INDEXING:
            raise ValueError(
                f"`rope_grid_indexing` must be one of {ROPE_GRID_INDEXING}, got {self.rope_grid_indexing!r}.")
        if self.rope_ref_grid_size is not None:
            set_(self, "rope_ref_grid_size", check_hw("rope_ref_grid_size", self.rope_ref_grid_size))
        offset, temperature = self.rope_grid_offset, self.rope_temperature
        if isinstance(offset, bool) or not isinstance(offset, numbers.Real):
            raise ValueError(f"`rope_grid_offset` must be a number, e.g. 0 or 1, got {offset!r}.")
        set_(self, "rope_grid_offset", float(offset))
        if temperature is not None:
            if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or temperature <= 0:
                raise ValueError(f"`rope_temperature` must be a positive number or None, got {temperature!r}.")
            set_(self, "rope_temperature", float(temperature))
        if self.rope is None:
            changed = [f for f, default in (("rope_temperature", None), ("rope_grid_offset", 0.0),
                                            ("rope_ref_grid_size", None), ("rope_grid_indexing", "ij"))
                       if getattr(self, f) != default]
            if changed:
                raise ValueError(f"{changed} configure a 2-D RoPE but `rope` is None; pass rope='interleaved', "
                                 "'rotate_half' or 'mixed', or leave them at their defaults.")
            return
        head_dim = self.hidden_size // self.num_heads
        if head_dim % 4:
            raise ValueError(f"2-D RoPE needs a head width (hidden_size / num_heads = {head_dim}) divisible by 4; "
                             "change hidden_size or num_heads.")
        if self.rope == "mixed" and self.rope_ref_grid_size is not None:
            raise ValueError("rope='mixed' uses integer patch positions: `rope_ref_grid_size` must be None.")
        if self.rope == "rotate_half" and self.rope_ref_grid_size is not None:
            raise ValueError("rope='rotate_half' (DINOv3) maps each axis to [-1, 1] by its own size: "
                             "`rope_ref_grid_size` must be None.")

    def _check_radio_parts(self):
        set_ = object.__setattr__
        if not self.final_norm and self.fc_norm:
            raise ValueError("`final_norm=False` means no norm after the blocks, neither over every token nor after "
                             "pooling (`fc_norm`); pass fc_norm=False, or final_norm=True.")
        if self.input_normalization is not None:
            set_(self, "input_normalization", check_input_normalization(self.input_normalization))

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens in front of the patches: class tokens, distillation, registers (in that order)."""
        return prefix_token_count(self.class_token, self.num_class_tokens, self.distilled, self.num_register_tokens)

    @property
    def block(self) -> BlockConfig:
        """What each encoder block reads (`vit_keras.layers.TransformerBlock` takes it whole), made with the config.

        Example:
            >>> VARIANTS["B/16"].block.num_heads, VARIANTS["B/16"].block.num_prefix_tokens
            (12, 1)
        """
        return self._block

    @property
    def patch(self) -> PatchConfig:
        """What the patch embedding reads (`vit_keras.layers.PatchEncoder` takes it whole), made with the config.

        Example:
            >>> VARIANTS["B/16"].patch.grid_size, VARIANTS["B/16"].patch.num_embedded_prefix_tokens
            ((14, 14), 1)
        """
        return self._patch

    @property
    def pooling_head(self) -> PoolingHeadConfig | None:
        """What the attention-pooling head of `global_pool="map"` reads (`MAPHead` / `AttentionPoolingHead` take it
        whole), made with the config; None for other poolings.

        Example:
            >>> ViTConfig(image_size=224, patch_size=16, global_pool="map", class_token=False).pooling_head.mlp_dim
            3072
        """
        return self._pooling_head

    def _make_pooling_head(self) -> PoolingHeadConfig | None:
        if self.global_pool != "map":
            return None
        if self.map_head == "aimv2":
            return PoolingHeadConfig(num_heads=self.num_heads, kind="aimv2", qkv_bias=self.qkv_bias)
        return PoolingHeadConfig(num_heads=self.map_num_heads or self.num_heads,
                                 mlp_dim=self.map_mlp_dim or self.mlp_dim,
                                 layer_norm_epsilon=self.layer_norm_epsilon, activation=self.activation)

    @property
    def image_grid(self) -> tuple[int, int] | None:
        """The patch grid of the model's images (None for image_size=None); `grid_size` is the table's grid.

        Example:
            >>> ViTConfig(patch_size=8, image_size=(32, 48), pos_interpolation="bilinear_crop",
            ...           pos_grid=(8, 8), no_embed_class=True).image_grid
            (4, 6)
        """
        if self.image_size is None:
            return None
        return (self.image_size[0] // self.stride, self.image_size[1] // self.stride)

    @property
    def num_embedded_prefix_tokens(self) -> int:
        """Prefix tokens that have a row in the position-embedding table."""
        return self.patch.num_embedded_prefix_tokens

    @property
    def feature_stride(self) -> int:
        """How many image pixels one position of the patchified feature map spans (before the patch size)."""
        return resnet_stride(self.resnet)

    @property
    def dynamic(self) -> bool:
        """Whether the model takes any image size (`image_size=None`)."""
        return self.image_size is None

    @property
    def stride(self) -> int:
        """Image pixels per patch along each axis: `patch_size`, times the ResNet stem's stride for hybrids."""
        return self.feature_stride * self.patch_size

    @property
    def grid_size(self) -> tuple[int, int]:
        """The patch grid of the position-embedding table: the model's grid, or `pos_grid` when it is set
        (image_size=None, or a table that is part of the architecture: `ARCHITECTURAL_POS_INTERPOLATIONS`)."""
        if self.pos_grid is not None:
            return self.pos_grid
        return self.image_grid

    @property
    def reference_image_size(self) -> tuple[int, int]:
        """The image size whose grid the position embeddings are stored at (`image_size` when it is fixed).

        Example:
            >>> ViTConfig(image_size=None, pos_grid=(24, 24)).reference_image_size
            (384, 384)
        """
        return (self.grid_size[0] * self.stride, self.grid_size[1] * self.stride)

    @property
    def gelu_approximate(self) -> bool | None:
        return {"gelu_tanh": True, "gelu": False}.get(self.activation)

    def replace(self, **changes) -> ViTConfig:
        """A copy with some fields changed (validated again).

        Example:
            >>> VARIANTS["B/16"].replace(image_size=384).grid_size
            (24, 24)
        """
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Plain JSON-able fields (what a model's layers store and `from_dict` reads back).

        Example:
            >>> ViTConfig.from_dict(VARIANTS["B/16"].to_dict()) == VARIANTS["B/16"]
            True
        """
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["resnet"] = None if self.resnet is None else self.resnet.to_dict()
        out["image_size"] = None if self.image_size is None else list(self.image_size)
        out["pos_grid"] = None if self.pos_grid is None else list(self.pos_grid)
        out["rope_ref_grid_size"] = None if self.rope_ref_grid_size is None else list(self.rope_ref_grid_size)
        out["input_normalization"] = (None if self.input_normalization is None else
                                      [list(part) for part in self.input_normalization])
        return out

    @classmethod
    def from_dict(cls, values: Mapping) -> ViTConfig:
        """Rebuild from `to_dict`'s output; unknown keys are refused by name.

        Example:
            >>> ViTConfig.from_dict({"patch_size": 8, "hidden_size": 48, "num_heads": 3}).mlp_dim
            3072
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"Unknown ViTConfig fields {unknown}; the fields are {sorted(known)}.")
        values = dict(values)
        for field in ("image_size", "pos_grid", "rope_ref_grid_size"):
            if isinstance(values.get(field), list):
                values[field] = tuple(values[field])
        if isinstance(values.get("input_normalization"), list):
            values["input_normalization"] = tuple(tuple(part) if isinstance(part, list) else part
                                                  for part in values["input_normalization"])
        return cls(**values)

    def model_kwargs(self) -> dict:
        """Keyword arguments for `vit_keras.ViT` that rebuild this architecture: the fields that differ from the
        dataclass defaults (all but `name`, which `ViT` leaves to the Keras model's own `name`).

        Example:
            >>> VARIANTS["L/32"].model_kwargs()
            {'patch_size': 32, 'hidden_size': 1024, 'mlp_dim': 4096, 'num_heads': 16, 'num_layers': 24}
            >>> VARIANTS["B/16"].model_kwargs()
            {}
        """
        defaults = ViTConfig()
        return {field: getattr(self, field) for field in config_fields()
                if getattr(self, field) != getattr(defaults, field)}


def check_input_normalization(value) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """`(mean, std)` per channel of [0, 1] images, as tuples of floats: finite means, finite positive stds.

    Example:
        >>> check_input_normalization([[0.5, 0.5, 0.5], [0.25, 0.25, 0.25]])
        ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    """
    try:
        mean, std = value
        mean, std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
    except (TypeError, ValueError) as error:
        raise ValueError("`input_normalization` must be (mean, std) per channel of [0, 1] images, e.g. "
                         f"((0.48, 0.46, 0.41), (0.27, 0.26, 0.28)), got {value!r}.") from error
    if not mean or len(mean) != len(std):
        raise ValueError(f"`input_normalization` needs as many means as stds (one per channel), got {value!r}.")
    if not all(math.isfinite(m) for m in mean) or not all(math.isfinite(s) and s > 0 for s in std):
        raise ValueError(f"`input_normalization` needs finite means and finite positive stds, got {value!r}.")
    return mean, std


def config_fields() -> tuple[str, ...]:
    """The `ViTConfig` fields a model constructor takes: all but `name` (a model's `name` is its Keras name).

    Example:
        >>> "layer_scale" in config_fields() and "name" not in config_fields()
        True
    """
    return tuple(f.name for f in dataclasses.fields(ViTConfig) if f.name != "name")


# Each field's default: what a partial config (a dict of some fields) leaves to the dataclass.
FIELD_DEFAULTS = {field.name: field.default for field in dataclasses.fields(ViTConfig)}


@dataclasses.dataclass(frozen=True)
class StoredTable:
    """What a partial config says of its position-embedding table before the config is made (`stored_table`).

    `any_grid`: nothing is stored at a patch grid (`position_embedding="none"`: RoPE only, e.g. DINOv3), so the
    model runs at any grid its patches divide without resampling anything; `architectural`: the table is part of
    the architecture (`ARCHITECTURAL_POS_INTERPOLATIONS`), kept at its own grid; `grid`: the grid the table is
    stored at for the fields' `image_size` (None without one).
    """

    any_grid: bool
    architectural: bool
    grid: tuple[int, int] | None


def stored_table(fields: Mapping) -> StoredTable:
    """The position table of a partial config (a dict of `ViTConfig` fields; a missing field has its default).

    Example:
        >>> stored_table({"patch_size": 8, "image_size": (32, 48)})
        StoredTable(any_grid=False, architectural=False, grid=(4, 6))
        >>> stored_table({"position_embedding": "none", "rope": "rotate_half", "image_size": None}).any_grid
        True
    """
    known = {**FIELD_DEFAULTS, **fields}
    architectural = known["pos_interpolation"] in ARCHITECTURAL_POS_INTERPOLATIONS
    grid = None
    if architectural and known["pos_grid"] is not None:
        grid = check_hw("pos_grid", known["pos_grid"])
    elif known["image_size"] is not None:
        size = check_hw("image_size", known["image_size"])
        stride = check_image_sides(size, check_positive_int("patch_size", known["patch_size"]), known["resnet"])
        grid = (size[0] // stride, size[1] // stride)
    return StoredTable(any_grid=known["position_embedding"] == "none", architectural=architectural, grid=grid)

CLASSIFIER_POOLS = {"token": "token", "gap": "avg", "map": "map"}


def translate_aliases(arguments: Mapping) -> dict:
    """Map the constructors' older argument names onto `ViTConfig` fields; every other key is passed on as is.

    `classifier="token" | "gap" | "map"` is `global_pool="token" | "avg" | "map"` (the last two without a class
    token unless `class_token` says otherwise); `gelu_approximate=True | False` is `activation="gelu_tanh" |
    "gelu"` (None, or an explicit `activation`, leaves it to `activation`). A `classifier` that contradicts an
    explicit `global_pool` is refused.

    Example:
        >>> translate_aliases({"classifier": "gap", "gelu_approximate": False})
        {'global_pool': 'avg', 'class_token': False, 'activation': 'gelu'}
    """
    out = dict(arguments)
    if "classifier" in out:
        classifier = out.pop("classifier")
        if classifier not in CLASSIFIER_POOLS:
            raise ValueError(f"`classifier` must be 'token', 'gap' or 'map', got {classifier!r}.")
        pool = CLASSIFIER_POOLS[classifier]
        if out.get("global_pool", pool) != pool:
            raise ValueError(f"`classifier={classifier!r}` means global_pool={pool!r} but `global_pool` is "
                             f"{out['global_pool']!r}; pass only one of them.")
        out["global_pool"] = pool
        out.setdefault("class_token", classifier == "token")
    if "gelu_approximate" in out:
        approximate = out.pop("gelu_approximate")
        if approximate is not None and not isinstance(approximate, bool):
            raise ValueError(f"`gelu_approximate` must be True, False or None, got {approximate!r}.")
        if approximate is not None and out.get("activation") is None:
            out["activation"] = "gelu_tanh" if approximate else "gelu"
    return out


def _row(name, patch, hidden, mlp, heads, layers, resnet=None, dropout=0.0):
    return ViTConfig(name, patch, hidden, mlp, heads, layers, resnet=resnet, dropout_rate=dropout)


VARIANTS: dict[str, ViTConfig] = {
    c.name: c
    for c in (
        _row("Ti/16", 16, 192, 768, 3, 12),
        _row("S/16", 16, 384, 1536, 6, 12),
        _row("S/32", 32, 384, 1536, 6, 12),
        _row("B/8", 8, 768, 3072, 12, 12),
        _row("B/16", 16, 768, 3072, 12, 12),
        _row("B/32", 32, 768, 3072, 12, 12),
        _row("L/16", 16, 1024, 4096, 16, 24, dropout=0.1),
        _row("L/32", 32, 1024, 4096, 16, 24),
        _row("H/14", 14, 1280, 5120, 16, 32, dropout=0.1),
        # Hybrids: the patch size applies to the ResNet feature map, not to the image.
        _row("R+Ti/16", 8, 192, 768, 3, 12, resnet=ResNetConfig(())),
        _row("R26+S/32", 1, 384, 1536, 6, 12, resnet=ResNetConfig((2, 2, 2, 2))),
        _row("R50+B/16", 1, 768, 3072, 12, 12, resnet=ResNetConfig((3, 4, 9)), dropout=0.1),
        _row("R26+B/32", 1, 768, 3072, 12, 12, resnet=ResNetConfig((2, 2, 2, 2))),
        _row("R50+L/32", 1, 1024, 4096, 16, 24, resnet=ResNetConfig((3, 4, 6, 3)), dropout=0.1),
    )
}
