"""A checkpoint reader is a table of rules over the canonical schema (`vit_keras.weights.schema`); one engine applies
any table to a file's tensors, and every refusal (an unknown tensor, a missing one, one the config rules out) comes
from the table and names the source keys.

A `Rule` says: the source module `source` (a template: `{i}` matches a block index), read with `transform`, gives
the canonical arrays under `target` (the same placeholders). The transform names the module's tensors (`weight`,
`bias`: the keys are `{source}.weight`, `{source}.bias`) and converts them (`vit_keras.weights.torch_layout`). Each
rule also says which tensors must be there:

- the weight, always (a bias without its weight is refused);
- the bias: `bias=True` always; `bias="qkv_bias"` (a `ViTConfig` switch) when the config says so, and then a bias
  the config rules out is refused too. Where no config is known (a bare state dict), the file must be consistent:
  if one block has the bias, every block must;
- the module itself: `required=True` rules must match (in every block for `{i}` rules); a rule that is not
  required (LayerScale, registers, a head) is optional, but an `{i}` rule that matches in one block must match in
  every block, and rules of one `part` (e.g. the attention-pooling head) are all there or none.

A library whose tensors carry a fixed prefix (`vit.`, `vision_model.`) lists it in `Table.prefixes`; `ignored`
lists tensors that are not part of the forward pass; `refused` names parts of architectures vit_keras does not
implement, so that they are refused as such rather than as unknown.

Example:
    >>> table = Table("toy", (Rule("fc", "head", LINEAR, required=True),))
    >>> sorted(apply_table(table, {"fc.weight": np.zeros((3, 2)), "fc.bias": np.zeros(3)}, num_heads=1))
    ['head/bias', 'head/kernel']
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping

import numpy as np

from vit_keras.configs import ViTConfig
from vit_keras.weights import torch_layout
from vit_keras.weights.safetensors_io import INDEX_BUFFERS
from vit_keras.weights.schema import architecture_shapes, is_canonical, is_canonical_template, template_regex


@dataclasses.dataclass(frozen=True)
class Transform:
    """How one source module's tensors become canonical arrays.

    `convert(target, weight, bias, num_heads)` returns `{canonical name: array}`; `weight` and `bias` are the
    module's parameter names (`weight=""`: the module name is the tensor's own key; `bias=None`: it has none);
    `sep` joins module and parameter (`"."`, or `"_"` for torch's `in_proj_weight`); `outputs` are the names it
    gives below `target` (checked against the schema when a rule is made). `inverse(target, params, num_heads)`
    is the way back: the module's (weight, bias) from the canonical dict (`invert_table`).

    Example:
        >>> LINEAR.outputs
        ('kernel', 'bias')
    """

    convert: Callable
    outputs: tuple[str, ...]
    weight: str = "weight"
    bias: str | None = "bias"
    sep: str = "."
    inverse: Callable | None = None

    def key(self, module: str, param: str) -> str:
        return f"{module}{self.sep}{param}" if param else module


def _no_heads(function):
    return lambda target, weight, bias, num_heads: function(target, weight, bias)


def _back_no_heads(function):
    return lambda target, params, num_heads: function(target, params)


LINEAR = Transform(_no_heads(torch_layout.linear), ("kernel", "bias"), inverse=_back_no_heads(torch_layout.linear_back))
NORM = Transform(_no_heads(torch_layout.norm), ("scale", "bias"), inverse=_back_no_heads(torch_layout.norm_back))
PATCH = Transform(_no_heads(torch_layout.patch), ("kernel", "bias"), inverse=_back_no_heads(torch_layout.patch_back))
# A Linear over patches flattened (row, column, channel) (SigLIP 2 NaFlex, timm NaFlexEmbeds).
LINEAR_PATCH = Transform(_no_heads(torch_layout.linear_patch), ("kernel", "bias"),
                         inverse=_back_no_heads(torch_layout.linear_patch_back))
# A bias-free Linear over channel-major (C, P, P) patches (RADIO's patch embedder).
LINEAR_PATCH_CHW = Transform(_no_heads(torch_layout.linear_patch_chw), ("kernel", "bias"), bias=None,
                             inverse=_back_no_heads(torch_layout.linear_patch_chw_back))
# A Linear without a bias (CLIP's projections): the module has a weight only.
LINEAR_NO_BIAS = dataclasses.replace(LINEAR, bias=None, outputs=("kernel",))
# An array kept in the source's shape (the text tower's token and position tables).
ARRAY = Transform(_no_heads(torch_layout.array), ("",), weight="weight", bias=None,
                  inverse=_back_no_heads(torch_layout.array_back))
# A projection stored as the matrix of `x @ P` (open_clip's `proj`), the module's own key.
MATRIX = Transform(_no_heads(torch_layout.matrix), ("kernel",), weight="", bias=None,
                   inverse=_back_no_heads(torch_layout.matrix_back))
HEADS_IN = Transform(torch_layout.heads_in, ("kernel", "bias"), inverse=torch_layout.heads_in_back)
HEADS_OUT = Transform(torch_layout.heads_out, ("kernel", "bias"), inverse=torch_layout.heads_out_back)


def tokens(param: str = "", rank: int = 3) -> Transform:
    """Learned tokens or a position table, stored as the module's own key (`param=""`) or as `{module}.{param}`
    (transformers' `position_embedding.weight`), reshaped to `(1, n, D)`; `rank` is how the source stores it
    (3: `(1, n, D)`, 2: `(n, D)`, 1: one token `(D,)`), which the way back restores.

    Example:
        >>> tokens("weight").key("embeddings.position_embedding", "weight")
        'embeddings.position_embedding.weight'
    """
    return Transform(_no_heads(torch_layout.tokens), ("",), weight=param, bias=None,
                     inverse=lambda target, params, num_heads: torch_layout.tokens_back(target, params, rank))


TOKENS = tokens()


def scalar(rank: int) -> Transform:
    """A one-value parameter stored as the tensor's own key at rank 0 `()` or 1 `(1,)` (the logit scale and bias),
    read as a scalar and written back at that rank.

    Example:
        >>> scalar(1).key("logit_bias", "")
        'logit_bias'
    """
    return Transform(_no_heads(torch_layout.scalar), ("",), weight="", bias=None,
                     inverse=lambda target, params, num_heads: torch_layout.scalar_back(target, params, rank))


def scale(param: str) -> Transform:
    """A per-channel scale stored as `{module}.{param}` (timm `gamma`, transformers `lambda1`).

    Example:
        >>> scale("gamma").key("blocks.0.ls1", "gamma")
        'blocks.0.ls1.gamma'
    """
    return Transform(_no_heads(torch_layout.scale), ("scale",), weight=param, bias=None,
                     inverse=_back_no_heads(torch_layout.scale_back))


def fused(*parts: str, weight: str = "weight", bias: str = "bias", sep: str = ".") -> Transform:
    """A fused projection split along its outputs into the named parts, q first (`fused("query", "key", "value")`
    is timm's `qkv`), each in the per-head layout.

    Example:
        >>> fused("key", "value").outputs
        ('key/kernel', 'key/bias', 'value/kernel', 'value/bias')
    """

    def convert(target, weight_array, bias_array, num_heads):
        prefixes = [f"{target}/{part}" for part in parts]
        return torch_layout.fused_heads(prefixes, weight_array, bias_array, num_heads)

    def inverse(target, params, num_heads):
        return torch_layout.fused_heads_back([f"{target}/{part}" for part in parts], params, num_heads)

    return Transform(convert, tuple(f"{part}/{name}" for part in parts for name in ("kernel", "bias")),
                     weight=weight, bias=bias, sep=sep, inverse=inverse)


@dataclasses.dataclass(frozen=True)
class Rule:
    """Source module template -> canonical target template, with its transform and what must be there.

    Example:
        >>> Rule("blocks.{i}.norm1", "Transformer/encoderblock_{i}/LayerNorm_0", NORM, required=True).match(
        ...     "blocks.3.norm1.bias")
        ('bias', (('i', '3'),))
    """

    source: str
    target: str
    transform: Transform
    required: bool = False
    bias: bool | str = True
    part: str = ""

    def __post_init__(self):
        for output in self.transform.outputs:
            name = f"{self.target}/{output}" if output else self.target
            if not is_canonical_template(name):
                raise ValueError(f"Rule {self.source!r} -> {name!r}: not a canonical name (vit_keras.weights.schema).")
        object.__setattr__(self, "_module", template_regex(self.source))

    @property
    def per_block(self) -> bool:
        return "{i}" in self.source

    @property
    def placeholders(self) -> bool:
        return "{" in self.source

    def params(self) -> dict[str, str]:
        """role ("weight"/"bias") -> the module's parameter name."""
        out = {"weight": self.transform.weight}
        if self.transform.bias is not None:
            out["bias"] = self.transform.bias
        return out

    def match(self, key: str):
        """(role, placeholder values) when `key` is one of this rule's tensors, else None."""
        for role, param in self.params().items():
            module = key if not param else key[: -len(self.transform.sep + param)]
            if param and not key.endswith(self.transform.sep + param):
                continue
            found = self._module.match(module)
            if found:
                return role, tuple(sorted(found.groupdict().items()))
        return None

    def key(self, role: str, groups) -> str:
        return self.transform.key(self.source.format(**dict(groups)), self.params()[role])


@dataclasses.dataclass(frozen=True)
class Table:
    """One library's rules. `prefixes`: leading names a library may put before every tensor (reported as found);
    `ignored`: source templates that are not part of the forward pass; `refused`: (substring, what it is) for the
    parts of architectures vit_keras does not implement.

    Example:
        >>> Table("toy", ()).family
        'toy'
    """

    family: str
    rules: tuple[Rule, ...]
    prefixes: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()

    def strip(self, key: str) -> tuple[str, str]:
        for prefix in self.prefixes:
            if key.startswith(prefix):
                return prefix, key[len(prefix):]
        return "", key

    @functools.cached_property
    def _ignored(self):
        return [template_regex(template) for template in self.ignored]

    def is_ignored(self, name: str) -> bool:
        return name.rsplit(".", 1)[-1] in INDEX_BUFFERS or any(regex.match(name) for regex in self._ignored)

    def knows(self, key: str) -> bool:
        """Whether `key` is one of this table's tensors (a rule's, or one it ignores): how a checkpoint holding
        several towers is split among their tables.

        Example:
            >>> Table("toy", (Rule("fc", "head", LINEAR),)).knows("fc.bias")
            True
        """
        name = self.strip(key)[1]
        return self.is_ignored(name) or any(rule.match(name) for rule in self.rules)


class CanonicalParams(dict):
    """A canonical dict that remembers, for each name, the source tensor it was made from (`origins`: name ->
    "key (shape)" in the file `source`), so that a later shape mismatch names what the file holds.

    Example:
        >>> CanonicalParams({"cls": np.zeros((1, 1, 8))}, {"cls": "cls_token (1, 1, 8)"}, "m.safetensors").origins
        {'cls': 'cls_token (1, 1, 8)'}
    """

    def __init__(self, params, origins: Mapping[str, str], source: str):
        super().__init__(params)
        self.origins = dict(origins)
        self.source = source


def apply_table(table: Table, tensors: Mapping[str, np.ndarray], *, num_heads: int, source: str = "the checkpoint",
                switches: Mapping[str, bool] | None = None, fields: Mapping | None = None) -> CanonicalParams:
    """The canonical dict of `tensors` read with `table`; a `ValueError` naming every unknown, missing or ruled-out
    source key (and the file `source`) otherwise, before anything is converted.

    `switches` are the config's `ViTConfig` fields (e.g. `{"qkv_bias": False}`); None: the file alone says.
    `fields`: the architecture the config describes (`ViTConfig` fields); every tensor whose shape it fixes
    (`schema.architecture_shapes`, brought into the source's layout by the rule's inverse) is checked against it
    first, and each one of another shape is named with the shape found and the shape expected. A tensor that cannot
    be converted at all (e.g. a fused q/k/v that does not split into the heads) is refused by its key and shape.

    Example:
        >>> table = Table("toy", (Rule("fc", "head", LINEAR, required=True),))
        >>> try:
        ...     apply_table(table, {"fc.bias": np.zeros(3)}, num_heads=1, source="toy.safetensors")
        ... except ValueError as error:
        ...     print(str(error).splitlines()[1])
        Missing (1): fc.weight (its bias fc.bias is there)
    """
    found: dict[tuple[int, tuple], dict[str, tuple[str, np.ndarray]]] = {}
    unknown, prefixes = [], {}
    for key, value in tensors.items():
        prefix, name = table.strip(key)
        for marker, what in table.refused:
            if marker in name:
                raise ValueError(f"{source}: this {table.family} checkpoint uses {what} ({key!r}), which vit_keras "
                                 "does not implement.")
        if table.is_ignored(name):
            continue
        for index, rule in enumerate(table.rules):
            matched = rule.match(name)
            if matched:
                role, groups = matched
                found.setdefault((index, groups), {})[role] = (key, value)
                prefixes[prefix] = prefixes.get(prefix, 0) + 1
                break
        else:
            unknown.append(key)
    prefix = max(prefixes, key=prefixes.get) if prefixes else ""
    blocks = sorted({int(dict(groups)["i"]) for (index, groups) in found if table.rules[index].per_block})
    blocks = list(range(blocks[-1] + 1)) if blocks else []
    parts_present = {table.rules[index].part for (index, _) in found} - {""}
    missing, ruled_out = [], []
    for index, rule in enumerate(table.rules):
        instances = [groups for (i, groups) in found if i == index]
        if rule.per_block:
            expected = [(("i", str(b)),) for b in blocks] if rule.required or instances else []
            why_absent = "every block has one" if rule.required else "the other blocks have it"
        elif instances or rule.placeholders:
            expected = instances  # e.g. one rule per ResNet unit: each unit it matches must be whole
            why_absent = ""
        else:
            expected = [()] if rule.required or rule.part in parts_present else []
            why_absent = (f"every {table.family} model has it" if rule.required else
                          f"the rest of its {rule.part} is there")
        bias_wanted, why_bias = _bias_wanted(rule, instances, found, index, switches, table.family)
        for groups in expected:
            parts = found.get((index, groups), {})
            if not parts:
                missing.append(f"{prefix}{rule.key('weight', groups)} ({why_absent})")
                continue
            if "weight" not in parts:
                missing.append(f"{prefix}{rule.key('weight', groups)} (its bias {parts['bias'][0]} is there)")
            if "bias" in rule.params():
                if bias_wanted and "bias" not in parts:
                    missing.append(f"{prefix}{rule.key('bias', groups)} ({why_bias})")
                elif not bias_wanted and "bias" in parts:
                    ruled_out.append(f"{parts['bias'][0]} ({why_bias})")
    if unknown or missing or ruled_out:
        lacks = f" lacks {missing[0].split(' (')[0]!r} and" if missing else ""
        lines = [f"{source}: this {table.family} checkpoint{lacks} does not hold what its architecture needs; nothing "
                 "was loaded."]
        if missing:
            lines.append(f"Missing ({len(missing)}): " + ", ".join(missing))
        if ruled_out:
            lines.append(f"Ruled out by the config ({len(ruled_out)}): " + ", ".join(ruled_out))
        if unknown:
            lines.append(f"Unknown (not a {table.family} vit_keras implements?) ({len(unknown)}): "
                         + ", ".join(sorted(unknown)))
        lines.append("Re-save the model's complete state dict with its library (safetensors), or check that the file "
                     "and its config describe the same model.")
        raise ValueError("\n".join(lines))
    expected_shapes = _ExpectedShapes(table, fields, num_heads)
    _check_shapes(table, found, expected_shapes, source)
    out: dict[str, np.ndarray] = {}
    origins: dict[str, str] = {}
    for (index, groups), parts in found.items():
        rule = table.rules[index]
        bias = parts.get("bias", (None, None))[1]
        try:
            converted = rule.transform.convert(rule.target.format(**dict(groups)), parts["weight"][1], bias,
                                               num_heads)
        except ValueError as error:  # a shape the transform cannot take (numpy's reshape errors included)
            raise ValueError(_unconvertible(table, rule, groups, parts, expected_shapes.of(index, parts), num_heads,
                                            source, error)) from None
        for name, value in converted.items():
            if name in out:
                raise ValueError(f"{source}: {table.family} tensors give {name!r} twice (e.g. {parts['weight'][0]}); "
                                 "the file holds one module under two names.")
            assert is_canonical(name), name  # guaranteed by Rule.__post_init__'s schema check
            out[name] = value
            key, array = parts["bias" if name.endswith("/bias") and "bias" in parts else "weight"]
            origins[name] = f"{key} {tuple(array.shape)}"
    return CanonicalParams(out, origins, source)


class _ExpectedShapes:
    """The source shapes (per role: "weight", "bias") the architecture `fields` fixes for each rule of a table: the
    canonical shapes of `schema.architecture_shapes` run through the rule's inverse (once per rule)."""

    def __init__(self, table: Table, fields: Mapping | None, num_heads: int):
        self.table, self.num_heads = table, num_heads
        self.canonical = architecture_shapes(fields) if fields else {}
        self.fields = fields or {}
        self._cache: dict = {}

    def of(self, index: int, parts) -> dict[str, tuple] | None:
        with_bias = "bias" in parts
        if (index, with_bias) not in self._cache:
            self._cache[(index, with_bias)] = self._compute(self.table.rules[index], with_bias)
        return self._cache[(index, with_bias)]

    def _compute(self, rule: Rule, with_bias: bool) -> dict[str, tuple] | None:
        names = [f"{rule.target}/{output}" if output else rule.target for output in rule.transform.outputs]
        if rule.transform.inverse is None:
            return self._torch_layout(rule, names, with_bias)
        needed = [name for name in names if with_bias or not name.endswith("/bias")]
        if not needed or any(name not in self.canonical for name in needed):
            return None
        zeros = {name: np.zeros(self.canonical[name], np.float32) for name in needed}
        try:
            weight, bias = rule.transform.inverse(rule.target, zeros, self.num_heads)
        except (ValueError, KeyError):
            return None
        return {"weight": tuple(weight.shape), **({"bias": tuple(bias.shape)} if bias is not None else {})}

    def _torch_layout(self, rule: Rule, names: list[str], with_bias: bool) -> dict[str, tuple] | None:
        """For a transform without an inverse (a reader's special case, e.g. EVA's q projection with its implied
        key bias): its weight is its first output, its bias the next bias, in torch's layout."""
        weight = names[0]
        bias = next((name for name in names[1:] if name.endswith("/bias")), None)
        roles = {"weight": weight, **({"bias": bias} if with_bias and bias and "bias" in rule.params() else {})}
        if any(name not in self.canonical for name in roles.values()):
            return None
        return {role: _torch_shape(name, self.canonical[name]) for role, name in roles.items()}

    def describe(self) -> str:
        names = ("hidden_size", "num_heads", "mlp_dim", "patch_size")
        return ", ".join(f"{name} {self.fields[name]}" for name in names if self.fields.get(name) is not None)


def _torch_shape(name: str, shape: tuple) -> tuple:
    """The torch shape of a canonical array (`vit_keras.weights.torch_layout`): per-head kernels and biases
    flattened, kernels (in, out) as Linear weights (out, in), the patch kernel as a convolution's (D, C, P, P).

    Example:
        >>> _torch_shape("Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel", (48, 3, 16))
        (48, 48)
    """
    if len(shape) == 4:
        return (shape[3], shape[2], shape[0], shape[1])
    if len(shape) == 3:
        return (shape[2], shape[0] * shape[1]) if name.endswith("out/kernel") else (shape[1] * shape[2], shape[0])
    if len(shape) == 2:
        return (shape[1], shape[0]) if name.endswith("kernel") else (shape[0] * shape[1],)
    return tuple(shape)


def _check_shapes(table: Table, found: dict, expected_shapes: _ExpectedShapes, source: str) -> None:
    """Refuse every tensor whose shape differs from the one the architecture fixes, naming key and both shapes."""
    if not expected_shapes.canonical:
        return
    wrong = []
    for (index, _), parts in found.items():
        expected = expected_shapes.of(index, parts)
        for role, (key, value) in sorted(parts.items()):
            if expected is not None and role in expected and tuple(value.shape) != expected[role]:
                wrong.append(f"{key}: found {tuple(value.shape)}, expected {expected[role]}")
    if wrong:
        raise ValueError(
            f"{source}: {len(wrong)} tensors of this {table.family} checkpoint do not have the shapes of the "
            f"architecture they are read for ({expected_shapes.describe()}); nothing was loaded.\n  "
            + "\n  ".join(sorted(wrong)) + "\nA truncated or transposed tensor means a damaged or hand-edited file: "
            "download or export it again; otherwise check that the file and its config (or the model's arguments) "
            "describe the same model.")


def _unconvertible(table, rule, groups, parts, expected, num_heads, source, error) -> str:
    found = ", ".join(f"{key} of shape {tuple(value.shape)}" for _, (key, value) in sorted(parts.items()))
    wanted = (f" (expected: {', '.join(f'{role} {shape}' for role, shape in sorted(expected.items()))})"
              if expected else "")
    return (f"{source}: {found} cannot be read as the {table.family} module {rule.source.format(**dict(groups))} "
            f"with {num_heads} heads{wanted}: {error} Nothing was loaded; the tensor is truncated or transposed, or "
            "the model has another number of heads.")


def config_switches(fields: Mapping | None, names=("qkv_bias", "patch_bias")) -> dict[str, bool] | None:
    """The bias switches a config's `ViTConfig` fields set, with `ViTConfig`'s defaults for the ones it leaves out
    (None: no config, the file alone says).

    Example:
        >>> config_switches({"patch_bias": False})
        {'qkv_bias': True, 'patch_bias': False}
    """
    if fields is None:
        return None
    defaults = {field.name: field.default for field in dataclasses.fields(ViTConfig)}
    return {name: bool(fields.get(name, defaults[name])) for name in names}


def source_name(tensors, source: str | None) -> str:
    """How errors name the file: `source`, or the path the tensors were read from (`read_safetensors`).

    Example:
        >>> source_name({}, None)
        'the checkpoint'
    """
    return source or getattr(tensors, "path", None) or "the checkpoint"


def _bias_wanted(rule, instances, found, index, switches, family):
    """Whether every instance of `rule` must have its bias, and why (for the message)."""
    if rule.bias is True:
        return True, f"every {family} {rule.source.replace('/', '.').rsplit('.', 1)[-1]} has one"
    if switches is not None and rule.bias in switches:
        value = bool(switches[rule.bias])
        return value, f"the config says {rule.bias}={value}"
    with_bias = [groups for groups in instances if "bias" in found[(index, groups)]]
    return bool(with_bias), "the other blocks have theirs" if with_bias else "no other block has one"


def invert_table(table: Table, params: Mapping[str, np.ndarray], *, num_heads: int, prefix: str = "",
                 unprefixed: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The source tensors that `apply_table(table, ...)` reads back as the canonical dict `params`: every rule's
    transform run backwards, its `{i}` (and other placeholders) expanded over the instances `params` holds.

    `prefix` goes before every key (transformers' `vit.` of a task model) except those of the rules whose target
    is in `unprefixed` (its `classifier`). A canonical array that no rule takes, or a rule that finds only part of
    what its module needs (a bias without its kernel), is refused by name: the target library has nowhere to put it.

    Example:
        >>> table = Table("toy", (Rule("fc", "head", LINEAR, required=True),))
        >>> params = {"head/kernel": np.zeros((2, 3)), "head/bias": np.zeros(3)}
        >>> invert_table(table, params, num_heads=1)["fc.weight"].shape
        (3, 2)
    """
    out: dict[str, np.ndarray] = {}
    used: set[str] = set()
    for rule in table.rules:
        if rule.transform.inverse is None:
            raise ValueError(f"{table.family}: the rule {rule.source!r} has no way back (its transform declares no "
                             "inverse).")
        names = [f"{rule.target}/{output}" if output else rule.target for output in rule.transform.outputs]
        regexes = [template_regex(name) for name in names]
        instances: dict[tuple, set[str]] = {}
        for key in params:
            for regex in regexes:
                found = regex.match(key)
                if found:
                    instances.setdefault(tuple(sorted(found.groupdict().items())), set()).add(key)
        for groups, keys in sorted(instances.items()):
            values = dict(groups)
            target = rule.target.format(**values)
            weights = [name.format(**values) for name in names if not name.endswith("/bias")]
            absent = [name for name in weights if name not in params]
            if absent:
                raise ValueError(f"{table.family}: {sorted(keys)} are there but not {absent}; the module "
                                 f"{rule.source.format(**values)} needs all of them.")
            weight, bias = rule.transform.inverse(target, params, num_heads)
            lead = "" if rule.target in unprefixed else prefix
            out[lead + rule.key("weight", groups)] = weight
            if bias is not None:
                if "bias" not in rule.params():
                    raise ValueError(f"{table.family}: {rule.source.format(**values)} has no bias, but the model has "
                                     f"{target}/bias.")
                out[lead + rule.key("bias", groups)] = bias
            used |= keys
    left = sorted(set(params) - used)
    if left:
        raise ValueError(f"{table.family} has no place for {len(left)} of the model's arrays: {', '.join(left)}.")
    return out
