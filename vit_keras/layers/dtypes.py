"""Dtype policies of layers that own sub-layers, so that a quantized model saves, reloads and rebuilds.

`model.quantize("int8")` rewrites each `Dense` / `EinsumDense` in place and gives it a quantized policy
(`int8_from_float32`). A vit_keras layer such as `PatchEncoder` or `TransformerBlock` creates those sub-layers
itself, from its own `dtype`, so its config must carry theirs or a reloaded model builds float sub-layers and cannot
take the saved int8 variables. As keras-hub does, the config then holds a `keras.dtype_policies.DTypePolicyMap`
keyed by the sub-layers' paths (`Transformer_encoderblock_0/MlpBlock_3/Dense_0`); the sub-layers are created with
that map, look their own path up in it when they are built, and build the quantized variables directly. Once built,
each sub-layer keeps only its own entry, as a plain policy: Keras 3.15's `Dense` and `EinsumDense` read
`self.dtype_policy.quantization_mode` when they save, which on a map is the map's default (float), and would write
an int8 layer without its scales.

Example:
    >>> import keras
    >>> from vit_keras.layers import TransformerBlock
    >>> block = TransformerBlock(num_heads=3, mlp_dim=96)
    >>> model = keras.Sequential([keras.Input((5, 48)), block])
    >>> model.quantize("int8")
    >>> type(keras.dtype_policies.get(block.get_config()["dtype"])).__name__
    'DTypePolicyMap'
"""

from __future__ import annotations

import re

import keras

DTypePolicyMap = keras.dtype_policies.DTypePolicyMap


def resolved_policy(layer) -> keras.DTypePolicy:
    """The policy `layer` computes with: its own, or its entry in the `DTypePolicyMap` it was given.

    Example:
        >>> resolved_policy(keras.layers.Dense(2, dtype="mixed_bfloat16")).name
        'mixed_bfloat16'
    """
    policy = layer.dtype_policy
    if isinstance(policy, DTypePolicyMap):
        return policy[layer.path] if layer.path else policy.default_policy
    return policy


def has_entry(policy_map: DTypePolicyMap, path: str) -> bool:
    """Whether `policy_map` names `path` itself (exactly or by one of its regex keys), not only by its default.

    Example:
        >>> has_entry(DTypePolicyMap("float32", {"head": "int8_from_float32"}), "head")
        True
    """
    return path in policy_map or any(re.fullmatch(key, path) for key in policy_map)


def policy_map(layer, default=None) -> DTypePolicyMap:
    """The policies of `layer`'s built descendants that differ from `default` (the layer's own policy), by path.

    Example:
        >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")], name="model")
        >>> model.quantize("int8")
        >>> policy_map(model)["model/dense"].name
        'int8_from_float32'
    """
    own = keras.dtype_policies.get(default) if default is not None else resolved_policy(layer)
    entries = {}
    for sublayer in layer._flatten_layers(include_self=False):
        policy = resolved_policy(sublayer)
        if sublayer.path and policy.name != own.name:
            entries[sublayer.path] = policy
    return DTypePolicyMap(default_policy=own.name, policy_map=entries)


def quantized_layers(layer) -> dict[str, str]:
    """`{path: quantization mode}` of every quantized layer in `layer` (a model or a layer).

    Example:
        >>> quantized_layers(keras.layers.Dense(2))
        {}
    """
    return {sublayer.path or sublayer.name: sublayer.quantization_mode
            for sublayer in layer._flatten_layers(include_self=True) if sublayer.quantization_mode}


def check_model_dtype(dtype):
    """A model's `dtype=` argument as a policy: None (the global policy), a name, a `DTypePolicy` or a
    `DTypePolicyMap` of layer paths (copied, with its default made explicit) whose default is not quantized.

    Example:
        >>> check_model_dtype("mixed_bfloat16").name
        'mixed_bfloat16'
    """
    if dtype is None:
        return None
    try:
        policy = keras.dtype_policies.get(dtype)
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"`dtype` must be a dtype policy name ('float32', 'mixed_bfloat16', ...), a keras.DTypePolicy or a "
            f"keras.dtype_policies.DTypePolicyMap of layer paths, got {dtype!r}."
        ) from error
    default = policy.default_policy if isinstance(policy, DTypePolicyMap) else policy
    if default.quantization_mode is not None:
        raise ValueError(
            f"`dtype={default.name!r}` would quantize every layer, LayerNorm included, which Keras cannot run. Build "
            f"the model in float and call `model.quantize({default.quantization_mode!r})`, or pass a DTypePolicyMap "
            "that names the quantized layers by path (`vit_keras.layers.dtypes.policy_map(quantized_model)`)."
        )
    if isinstance(policy, DTypePolicyMap):
        # A copy: quantizing the model must not write into the caller's map, and an explicit default keeps Keras
        # from blanking the names of the map's policies when it serializes it.
        # (`DTypePolicyMap(policy_map=...)` keeps the values as given: strings become policies here.)
        return DTypePolicyMap(default_policy=default.name,
                              policy_map={key: keras.dtype_policies.get(policy[key]) for key in policy})
    return policy


def policy_for(dtype, path: str, *, fallback=None):
    """The plain policy the layer at `path` gets from a model's `dtype` (None stays None: the global policy).

    `fallback` (e.g. "float32" for the classification head) applies unless a map names `path` itself.

    Example:
        >>> dtype = check_model_dtype(DTypePolicyMap("float32", {"head": "int8_from_float32"}))
        >>> policy_for(dtype, "head").name
        'int8_from_float32'
    """
    if isinstance(dtype, DTypePolicyMap):
        if fallback is not None and not has_entry(dtype, path):
            return keras.dtype_policies.get(fallback)
        return dtype[path]
    return fallback if fallback is not None else dtype


def pin_policies(layer) -> None:
    """Replace the `DTypePolicyMap` of `layer` and of its built descendants by each one's own entry.

    Example:
        >>> dense = keras.layers.Dense(2, dtype=DTypePolicyMap("float32")); dense.build((None, 3))
        >>> pin_policies(dense); type(dense.dtype_policy).__name__
        'DTypePolicy'
    """
    for sublayer in layer._flatten_layers(include_self=True):
        if isinstance(sublayer._dtype_policy, DTypePolicyMap):
            # The public setter would write into the (shared) map instead of replacing it.
            sublayer._dtype_policy = resolved_policy(sublayer)


class SublayerPolicies:
    """Mixin for a layer that creates its own sub-layers: its config's `dtype` keeps their policies.

    With no sub-layer policy of its own (the usual float case) the config holds the layer's policy, as Keras
    writes it; after quantization it holds a `DTypePolicyMap` of the sub-layers that differ (only those: a model-wide
    map the layer was built with is not copied into every block's config).

    Example:
        >>> class Block(SublayerPolicies, keras.layers.Layer):
        ...     def build(self, input_shape):
        ...         self.dense = keras.layers.Dense(4, dtype=self.dtype_policy, name="dense")
        ...         self.dense.build(input_shape)
        ...     def call(self, x):
        ...         return self.dense(x)
        >>> model = keras.Sequential([keras.Input((3,)), Block(name="block")], name="model")
        >>> model.quantize("int8")
        >>> policies = keras.dtype_policies.get(model.layers[0].get_config()["dtype"])
        >>> {path: policies[path].name for path in policies}
        {'model/block/dense': 'int8_from_float32'}
    """

    def _post_build(self):
        # Keras' hook that runs right after `build` (on every backend): the sub-layers exist and are built.
        super()._post_build()
        pin_policies(self)

    def get_config(self):
        config = super().get_config()
        policies = policy_map(self)
        config["dtype"] = keras.dtype_policies.serialize(policies if len(policies) else resolved_policy(self))
        return config
