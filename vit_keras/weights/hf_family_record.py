"""The record every transformers model type is read with: a `Family` says which config.json it answers to, the
`ViTConfig` fields every model of the type has, the config.json keys that set the others (`Key`) or that it refuses
(`RefusedKey`), the per-projection bias keys, its rule table (`vit_keras.weights.rules`) and, where a family truly
needs code, its hooks. `vit_keras.weights.hf_family_rows` holds the rows; `vit_keras.weights.hf` reads a directory
with the row its `model_type` names.

The config.json keys a family does not name change nothing in eval mode (dropout, stochastic depth, initial values,
training-time augmentations; each row says which), so vit_keras computes what transformers computes.

Example:
    >>> Key("hidden_act", str, "gelu", values=ACTIVATIONS).read({"hidden_act": "gelu_new"}, "config.json", {})
    {'activation': 'gelu_tanh'}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np

from vit_keras.weights import json_config, rules, torch_layout

REQUIRED = json_config._MISSING
# A Key kind: an image size stored as an int or [height, width] (`json_config.size_pair`).
SIZE = "an int or [height, width]"
# transformers' hidden_act values of a plain MLP -> ViTConfig.activation ("gelu" is the exact erf form; the tanh forms
# are the approximations). The one table of them: the readers, and save.py's inverse, name activations through it.
HIDDEN_ACTS = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_fast": "gelu_tanh", "quick_gelu": "quick_gelu"}
ACTIVATIONS = {act: {"activation": activation} for act, activation in HIDDEN_ACTS.items()}
# The ViTConfig bias switches a rule table may name (besides a family's own per-projection bias keys).
SWITCHES = ("qkv_bias", "patch_bias", "mlp_bias")


@dataclasses.dataclass(frozen=True)
class Key:
    """One config.json key: its JSON type (`SIZE`: an image size), transformers' default when absent (a value, or a
    function of the fields read before it, e.g. `intermediate_size` = 4 × `hidden_size`), and what it sets: `field`
    (the value copied to that `ViTConfig` field), `values` (each value transformers builds -> the fields it means;
    any other value is refused, naming the key and the values vit_keras runs) or `derive(value, fields)` (the
    fields it means, e.g. `mlp_ratio` -> `mlp_dim`).

    Example:
        >>> Key("use_head", bool, True, values={True: {"global_pool": "map"}}).read({}, "config.json", {})
        {'global_pool': 'map'}
    """

    name: str
    kind: type | tuple | str
    default: object = REQUIRED
    field: str | None = None
    values: Mapping | None = None
    derive: Callable[[object, Mapping], dict] | None = None
    positive: bool = False

    def read(self, config: dict, file: str, fields: Mapping) -> dict:
        default = self.default(fields) if callable(self.default) else self.default
        if self.kind == SIZE:
            value = json_config.size_pair(config, self.name, file, default=default)
        else:
            value = json_config.require(config, self.name, self.kind, file, default=default, positive=self.positive)
            value = float(value) if self.kind is float else value
        if self.derive is not None:
            return self.derive(value, fields)
        if self.values is None:
            return {} if self.field is None else {self.field: value}
        if value not in self.values:
            raise ValueError(f"{file!r}: {self.name!r} is {value!r}; vit_keras runs this model type with "
                             f"{self.name} in {sorted(self.values, key=str)}.")
        return dict(self.values[value])


@dataclasses.dataclass(frozen=True)
class RefusedKey:
    """config.json keys that describe a part vit_keras does not implement (`what`): a config that sets any of them
    (to anything but null or false) is refused, naming them.

    Example:
        >>> RefusedKey(("use_swiglu_ffn",), "a SwiGLU MLP").check({}, "config.json", "dinov2")
    """

    keys: tuple[str, ...]
    what: str

    def check(self, config: dict, file: str, model_type: str) -> None:
        present = [key for key in self.keys if config.get(key) not in (None, False)]
        if present:
            raise ValueError(f"{file!r}: {', '.join(present)} ({self.what}) is not implemented for Hugging Face "
                             f"{model_type!r} checkpoints in vit_keras; it reads the models without it.")


@dataclasses.dataclass(frozen=True)
class WholeModel:
    """An image-text model whose config.json nests a family's tower as `vision_config`: read as that tower (the
    other towers' tensors, under the prefixes `others`, are skipped: they are not part of the image features), or
    refused when `others` is None (save the vision tower and load that).

    Example:
        >>> WholeModel("clip").others is None
        True
    """

    model_type: str
    others: tuple[str, ...] | None = None


# A config.json read: the ViTConfig fields it gives, and the bias switches of its rule table.
Reading = tuple[dict, dict]


@dataclasses.dataclass(frozen=True)
class Family:
    """A transformers model type (`model_type`, written by the transformers `classes`): the `fixed` fields, the
    `keys` that set the others, the keys it `refuses`, the `bias_keys` (config.json keys with transformers'
    defaults that say whether a projection has a bias: the table's bias switches beside `SWITCHES`), and `table`,
    its rule table (or a function of the fields and switches choosing one, e.g. DINOv3's gated MLP).

    `whole`: the image-text model that nests it; `naflex`: no fixed image size (the position grid is resized per
    image, SigLIP 2 NaFlex). Hooks, where a family needs code: `derive(config, file, fields, biases)` -> more fields
    (read after the keys), `finish(params, tensors, config, fields, source)` -> the canonical params (checks of
    buffers that are not weights, tensors split by the config's counts).

    Example:
        >>> family = Family("toy", "ToyModel", {"class_token": False}, (Key("hidden_size", int, field="hidden_size"),),
        ...                 rules.Table("toy", ()))
        >>> family.read({"hidden_size": 48}, "config.json")[0]
        {'class_token': False, 'hidden_size': 48}
    """

    model_type: str
    classes: str
    fixed: Mapping
    keys: tuple[Key, ...]
    table: rules.Table | Callable[[Mapping, Mapping], rules.Table]
    bias_keys: tuple[tuple[str, bool], ...] = ()
    refuses: tuple[RefusedKey, ...] = ()
    whole: WholeModel | None = None
    naflex: bool = False
    derive: Callable[[dict, str, dict, dict], dict] | None = None
    finish: Callable | None = None

    def check(self, config: dict, file: str) -> None:
        """Refuse what vit_keras cannot run: a refused key, a value no `values` table holds, a bias key that is no
        bool (the sizes are read, and refused when missing, by `read`)."""
        for refused in self.refuses:
            refused.check(config, file, self.model_type)
        for key in self.keys:
            if key.values is not None:
                key.read(config, file, {})
        for key, default in self.bias_keys:
            json_config.require(config, key, bool, file, default=default)

    def read(self, config: dict, file: str) -> Reading:
        """(the `ViTConfig` fields, the bias switches) of the tower config `config` (`file` names it in errors)."""
        self.check(config, file)
        fields = dict(self.fixed)
        for key in self.keys:
            fields.update(key.read(config, file, fields))
        biases = {key: json_config.require(config, key, bool, file, default=default) for key, default in self.bias_keys}
        if self.derive is not None:
            fields.update(self.derive(config, file, fields, biases))
        return fields, {**rules.config_switches(fields, names=SWITCHES), **biases}

    def rule_table(self, fields: Mapping, switches: Mapping) -> rules.Table:
        """The rule table that reads the model `fields` and `switches` describe."""
        return self.table if isinstance(self.table, rules.Table) else self.table(fields, switches)


# ---- the keys every family reads, and the ones most read alike

SIZES = (
    Key("hidden_size", int, field="hidden_size", positive=True),
    Key("num_hidden_layers", int, field="num_layers", positive=True),
    Key("num_attention_heads", int, field="num_heads", positive=True),
    Key("patch_size", int, field="patch_size", positive=True),
    Key("num_channels", int, 3, values={3: {}}),  # vit_keras checkpoints take RGB
)
# save_pretrained always writes the sizes; one without them is refused by name rather than given transformers' class
# defaults, which would only surface later as shape mismatches.
INTERMEDIATE_SIZE = Key("intermediate_size", int, field="mlp_dim", positive=True)
# ViTConfig / CLIPVisionConfig / SiglipVisionConfig: absent means 4 × hidden_size.
INTERMEDIATE_SIZE_4X = dataclasses.replace(INTERMEDIATE_SIZE, default=lambda fields: 4 * fields["hidden_size"])
# Dinov2Config / RADIO: the MLP width as a ratio, int(hidden_size * mlp_ratio) as transformers builds it.
MLP_RATIO = Key("mlp_ratio", float, 4, positive=True,
                derive=lambda ratio, fields: {"mlp_dim": int(fields["hidden_size"] * ratio)})
ACTIVATION = Key("hidden_act", str, "gelu", values=ACTIVATIONS)
QKV_BIAS = Key("qkv_bias", bool, True, field="qkv_bias")


def image_size(default=REQUIRED) -> Key:
    """The `image_size` key (an int or [height, width]).

    Example:
        >>> image_size(224).read({}, "config.json", {})
        {'image_size': (224, 224)}
    """
    return Key("image_size", SIZE, default, field="image_size")


def layer_norm_eps(default: float, name: str = "layer_norm_eps") -> Key:
    """The norms' epsilon key, with the family's transformers default.

    Example:
        >>> layer_norm_eps(1e-12).read({}, "config.json", {})
        {'layer_norm_epsilon': 1e-12}
    """
    return Key(name, float, default, field="layer_norm_epsilon", positive=True)


# ---- the transforms beyond `rules`': RMSNorm weights, DINOv3's register tokens, biases absent by architecture

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
