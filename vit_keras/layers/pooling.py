"""Reduce the encoder's token sequence to one vector: a prefix token, the mean or max of the patches, or attention
pooling with a learned probe (MAP)."""

from __future__ import annotations

import keras
from keras import ops

from vit_keras.layers.checkpoint import nested, plain
from vit_keras.layers.dtypes import SublayerPolicies
from vit_keras.layers.transformer import MlpBlock, attention_checkpoint_variables

POOLINGS = ("token", "avg", "max", "map")


@keras.saving.register_keras_serializable(package="vit_keras")
class TokenPooling(keras.layers.Layer):
    """`"token"` takes prefix token `token_index` (the class token, 0, by default); `"avg"` / `"max"` reduce the
    patch tokens (prefix tokens excluded); `"distilled"` averages the class and distillation tokens (DeiT).

    vit_jax's `classifier="gap"` is `"avg"` on a model without a class token.

    Example:
        >>> tuple(TokenPooling("avg", num_prefix_tokens=1)(keras.ops.ones((2, 5, 8))).shape)
        (2, 8)
    """

    METHODS = ("token", "avg", "max", "distilled")

    def __init__(self, method: str = "token", num_prefix_tokens: int = 1, token_index: int = 0, **kwargs):
        super().__init__(**kwargs)
        if method not in self.METHODS:
            raise ValueError(f"`pooling` must be one of {self.METHODS} or None, got {method!r}.")
        if method == "token" and num_prefix_tokens <= token_index:
            raise ValueError(
                "pooling='token' needs a class token, but this model has none (classifier='gap'); "
                "use pooling='avg'."
            )
        self.method = method
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.token_index = int(token_index)

    def call(self, x):
        if self.method == "token":
            return x[:, self.token_index]
        if self.method == "distilled":
            return (x[:, 0] + x[:, 1]) / 2
        patches = x[:, self.num_prefix_tokens :]
        return ops.mean(patches, axis=1) if self.method == "avg" else ops.max(patches, axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "method": self.method, "num_prefix_tokens": self.num_prefix_tokens,
                "token_index": self.token_index}


@keras.saving.register_keras_serializable(package="vit_keras")
class MAPHead(SublayerPolicies, keras.layers.Layer):
    """Multi-head attention pooling: a learned probe attends to every token, then `x + MLP(LN(x))`.

    big_vision `MAPHead` (names `probe`, `MultiHeadDotProductAttention_0`, `LayerNorm_0`, `MlpBlock_0`), timm
    `AttentionPoolLatent` and SigLIP's `head` compute the same function; no residual around the attention.

    Example:
        >>> tuple(MAPHead(num_heads=2, mlp_dim=16)(keras.ops.ones((2, 5, 8))).shape)
        (2, 8)
    """

    def __init__(self, num_heads: int, mlp_dim: int, layer_norm_epsilon: float = 1e-6, activation: str = "gelu_tanh",
                 **kwargs):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy,
                                                    name="LayerNorm_0")
        self.mlp = MlpBlock(self.mlp_dim, activation=activation, dtype=self.dtype_policy, name="MlpBlock_0")
        self.activation = self.mlp.activation

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

    def call(self, x):
        probe = ops.broadcast_to(ops.cast(self.probe, x.dtype), (ops.shape(x)[0], 1, ops.shape(x)[-1]))
        y = self.attention(probe, x)
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
        return {**super().get_config(), "num_heads": self.num_heads, "mlp_dim": self.mlp_dim,
                "layer_norm_epsilon": self.layer_norm_epsilon, "activation": self.activation}
