"""Reduce the encoder's token sequence to one vector: a prefix token, the mean or max of the patches, or attention
pooling with a learned probe (MAP)."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from vit_keras.configs import PoolingHeadConfig, whole_or_keywords
from vit_keras.layers.checkpoint import nested, plain
from vit_keras.layers.dtypes import SublayerPolicies
from vit_keras.layers.transformer import MlpBlock, attention_checkpoint_variables

POOLINGS = ("token", "avg", "max", "map")


@keras.saving.register_keras_serializable(package="vit_keras")
class TokenPooling(keras.layers.Layer):
    """`"token"` takes prefix token `token_index` (the class token, 0, by default); `"avg"` / `"max"` reduce the
    patch tokens (prefix tokens excluded); `"distilled"` averages the class and distillation tokens (DeiT).
    `"token"` with `num_tokens` > 1 takes that many prefix tokens from `token_index` on, concatenated into one
    `(batch, num_tokens·D)` vector (RADIO's summary of its class tokens).

    vit_jax's `classifier="gap"` is `"avg"` on a model without a class token. Called with `token_mask` (`(batch,
    tokens)`, true for real tokens: a NaFlex batch, `vit_keras.layers.flexible`), `"avg"` / `"max"` reduce the real
    patch tokens only.

    Example:
        >>> tuple(TokenPooling("avg", num_prefix_tokens=1)(keras.ops.ones((2, 5, 8))).shape)
        (2, 8)
        >>> tuple(TokenPooling("token", num_prefix_tokens=4, num_tokens=2)(keras.ops.ones((2, 9, 8))).shape)
        (2, 16)
    """

    METHODS = ("token", "avg", "max", "distilled")

    def __init__(self, method: str = "token", num_prefix_tokens: int = 1, token_index: int = 0, num_tokens: int = 1,
                 **kwargs):
        super().__init__(**kwargs)
        if method not in self.METHODS:
            raise ValueError(f"`pooling` must be one of {self.METHODS} or None, got {method!r}.")
        if int(num_tokens) < 1 or (method != "token" and int(num_tokens) != 1):
            raise ValueError(f"`num_tokens` must be 1, or more for method='token', got {num_tokens!r}.")
        if method == "token" and num_prefix_tokens < token_index + int(num_tokens):
            raise ValueError(
                "pooling='token' needs a class token, but this model has none (classifier='gap'); "
                "use pooling='avg'."
            )
        self.method = method
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.token_index = int(token_index)
        self.num_tokens = int(num_tokens)

    def call(self, x, token_mask=None):
        if self.method == "token" and self.num_tokens > 1:
            tokens = x[:, self.token_index : self.token_index + self.num_tokens]
            return ops.reshape(tokens, (ops.shape(x)[0], self.num_tokens * x.shape[-1]))
        if self.method == "token":
            return x[:, self.token_index]
        if self.method == "distilled":
            return (x[:, 0] + x[:, 1]) / 2
        patches = x[:, self.num_prefix_tokens :]
        if token_mask is not None:
            valid = ops.cast(token_mask, "bool")[:, self.num_prefix_tokens :, None]
            if self.method == "avg":
                count = ops.sum(ops.cast(valid, patches.dtype), axis=1)
                return ops.sum(ops.where(valid, patches, 0.0), axis=1) / ops.maximum(count, 1.0)
            # In float32, whose lowest finite value stands below any activation, then back to the model's dtype.
            lowest = ops.max(ops.where(valid, ops.cast(patches, "float32"), -3.4e38), axis=1)
            return ops.cast(lowest, patches.dtype)
        return ops.mean(patches, axis=1) if self.method == "avg" else ops.max(patches, axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_tokens * input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "method": self.method, "num_prefix_tokens": self.num_prefix_tokens,
                "token_index": self.token_index, "num_tokens": self.num_tokens}


@keras.saving.register_keras_serializable(package="vit_keras")
class MAPHead(SublayerPolicies, keras.layers.Layer):
    """Multi-head attention pooling: a learned probe attends to every token, then `x + MLP(LN(x))`.

    big_vision `MAPHead` (names `probe`, `MultiHeadDotProductAttention_0`, `LayerNorm_0`, `MlpBlock_0`), timm
    `AttentionPoolLatent` and SigLIP's `head` compute the same function; no residual around the attention.
    `token_mask` (`(batch, tokens)`, true for real tokens) keeps a NaFlex batch's padding out of the attention.

    Example:
        >>> tuple(MAPHead(num_heads=2, mlp_dim=16)(keras.ops.ones((2, 5, 8))).shape)
        (2, 8)
    """

    def __init__(self, num_heads: int | None = None, mlp_dim: int | None = None, *,
                 head: PoolingHeadConfig | None = None, **kwargs):
        head = _head_config(head, kwargs, "big_vision", ("num_heads", "mlp_dim", "layer_norm_epsilon", "activation"),
                            num_heads=num_heads, mlp_dim=mlp_dim)
        super().__init__(**kwargs)
        self.head = head
        self.norm = keras.layers.LayerNormalization(epsilon=self.head.layer_norm_epsilon, dtype=self.dtype_policy,
                                                    name="LayerNorm_0")
        self.mlp = MlpBlock(self.head.mlp_dim, activation=self.head.activation, dtype=self.dtype_policy,
                            name="MlpBlock_0")

    @property
    def num_heads(self) -> int:
        return self.head.num_heads

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        self.probe = self.add_weight(name="probe", shape=(1, 1, hidden_size),
                                     initializer=keras.initializers.GlorotUniform())
        self.attention = keras.layers.MultiHeadAttention(
            num_heads=self.num_heads, key_dim=hidden_size // self.num_heads, kernel_initializer="glorot_uniform",
            dtype=self.dtype_policy, name="MultiHeadDotProductAttention_0",
        )
        probe_shape = (input_shape[0], 1, hidden_size)
        self.attention.build(probe_shape, input_shape)
        self.norm.build(probe_shape)
        self.mlp.build(probe_shape)

    def call(self, x, token_mask=None):
        probe = ops.broadcast_to(ops.cast(self.probe, x.dtype), (ops.shape(x)[0], 1, ops.shape(x)[-1]))
        mask = None if token_mask is None else ops.cast(token_mask, "bool")[:, None, :]
        y = self.attention(probe, x, attention_mask=mask)
        y = y + self.mlp(self.norm(y))
        return y[:, 0]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def checkpoint_variables(self):
        out = {"probe": plain(self.probe), **nested("LayerNorm_0", self.norm), **nested("MlpBlock_0", self.mlp)}
        out.update({f"MultiHeadDotProductAttention_0/{k}": v
                    for k, v in attention_checkpoint_variables(self.attention).items()})
        return out

    def get_config(self):
        head = self.head
        return {**super().get_config(), "num_heads": head.num_heads, "mlp_dim": head.mlp_dim,
                "layer_norm_epsilon": head.layer_norm_epsilon, "activation": head.activation}


@keras.saving.register_keras_serializable(package="vit_keras")
class AttentionPoolingHead(SublayerPolicies, keras.layers.Layer):
    """AIMv2's attention pooling: a learned token is the query (as it is, no query projection) of one multi-head
    attention over the tokens' key and value projections, then an output projection.

    transformers `Aimv2AttentionPoolingHead`: `softmax(q·kᵀ/√d_h) v` per head with `q` the learned `cls_token` split
    into heads, then `output_proj` (with its bias); the key/value projections have biases when `qkv_bias`. No norm
    and no MLP, unlike `MAPHead`. It fills the same checkpoint slot as `MAPHead` (`MAPHead_0`): `probe` and the key,
    value and output projections of `MultiHeadDotProductAttention_0`, in vit_jax's per-head layouts. `token_mask`
    (`(batch, tokens)`, true for real tokens) keeps a NaFlex batch's padding out of the attention, as `MAPHead`'s.

    Example:
        >>> tuple(AttentionPoolingHead(num_heads=2)(keras.ops.ones((2, 5, 8))).shape)
        (2, 8)
    """

    def __init__(self, num_heads: int | None = None, *, head: PoolingHeadConfig | None = None, **kwargs):
        head = _head_config(head, kwargs, "aimv2", ("num_heads", "qkv_bias"), num_heads=num_heads)
        super().__init__(**kwargs)
        self.head = head

    @property
    def num_heads(self) -> int:
        return self.head.num_heads

    @property
    def qkv_bias(self) -> bool:
        return self.head.qkv_bias

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        if hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {self.num_heads}.")
        head_dim = hidden_size // self.num_heads
        self.probe = self.add_weight(name="probe", shape=(1, 1, hidden_size),
                                     initializer=keras.initializers.RandomNormal(stddev=0.02))

        def projection(name):
            return keras.layers.EinsumDense("btd,dhe->bthe", output_shape=(None, self.num_heads, head_dim),
                                            bias_axes="he" if self.qkv_bias else None,
                                            kernel_initializer="glorot_uniform", dtype=self.dtype_policy, name=name)

        self.key_dense, self.value_dense = projection("key"), projection("value")
        self.output_dense = keras.layers.EinsumDense("bhe,hed->bd", output_shape=(hidden_size,), bias_axes="d",
                                                     kernel_initializer="glorot_uniform", dtype=self.dtype_policy,
                                                     name="out")
        self.key_dense.build(input_shape)
        self.value_dense.build(input_shape)
        self.output_dense.build((input_shape[0], self.num_heads, head_dim))

    def call(self, x, token_mask=None):
        key, value = self.key_dense(x), self.value_dense(x)  # (batch, tokens, heads, head_dim)
        head_dim = key.shape[-1]
        query = ops.reshape(ops.cast(self.probe, x.dtype), (self.num_heads, head_dim))
        logits = ops.einsum("he,bthe->bht", query, key) * ops.cast(head_dim ** -0.5, x.dtype)
        if token_mask is not None:
            # The lowest finite value of the dtype: exp() of it, less the row's maximum, is exactly 0 (as the masked
            # softmax of keras.layers.MultiHeadAttention), and never a NaN.
            lowest = float(np.finfo(keras.backend.standardize_dtype(logits.dtype)).min)
            logits = ops.where(ops.cast(token_mask, "bool")[:, None, :], logits, lowest)
        weights = ops.softmax(logits, axis=-1)
        return self.output_dense(ops.einsum("bht,bthe->bhe", weights, value))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def checkpoint_variables(self):
        out = {"probe": plain(self.probe)}
        for name, dense in (("key", self.key_dense), ("value", self.value_dense), ("out", self.output_dense)):
            out.update(nested(f"MultiHeadDotProductAttention_0/{name}", dense))
        return out

    def get_config(self):
        return {**super().get_config(), "num_heads": self.head.num_heads, "qkv_bias": self.head.qkv_bias}


def _head_config(head, kwargs: dict, kind: str, names, **given) -> PoolingHeadConfig:
    """The head's `PoolingHeadConfig`, whole (`head=config.pooling_head`, as `build_vit` passes it) or from the
    keywords `names` (the layer on its own, and the layer configs of `.keras` files): `whole_or_keywords`."""
    head = whole_or_keywords(PoolingHeadConfig, head, kwargs, argument="head", names=names,
                             make=lambda fields: PoolingHeadConfig.from_arguments(fields, kind), **given)
    if head.kind != kind:
        raise ValueError(f"This layer is the {kind!r} attention-pooling head; got a config of kind {head.kind!r}.")
    return head
