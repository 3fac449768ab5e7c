"""The pre-LayerNorm Transformer encoder block of the paper (vit_jax `Encoder1DBlock`)."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="vit_keras")
class MlpBlock(keras.layers.Layer):
    """`Dense(mlp_dim) → GELU → dropout → Dense(D) → dropout`, named like vit_jax (`Dense_0`, `Dense_1`).

    `gelu_approximate=True` is the tanh form that Google's checkpoints were trained with;
    `False` is the exact erf form of timm and Hugging Face.

    Example:
        >>> MlpBlock(mlp_dim=32)(keras.ops.zeros((2, 5, 8))).shape
        (2, 5, 8)
    """

    def __init__(self, mlp_dim: int, dropout_rate: float = 0.0, gelu_approximate: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.gelu_approximate = bool(gelu_approximate)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        dense = dict(
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            dtype=self.dtype_policy,
        )
        self.dense_0 = keras.layers.Dense(self.mlp_dim, name="Dense_0", **dense)
        self.dense_1 = keras.layers.Dense(hidden_size, name="Dense_1", **dense)
        self.dense_0.build(input_shape)
        self.dense_1.build((*input_shape[:-1], self.mlp_dim))

    def call(self, x, training=None):
        x = ops.gelu(self.dense_0(x), approximate=self.gelu_approximate)
        x = self.dropout(x, training=training)
        x = self.dense_1(x)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "mlp_dim": self.mlp_dim,
            "dropout_rate": self.dropout_rate,
            "gelu_approximate": self.gelu_approximate,
        }


@keras.saving.register_keras_serializable(package="vit_keras")
class TransformerBlock(keras.layers.Layer):
    """`x + MHSA(LN(x))`, then `x + MLP(LN(x))`, as in the paper's Eq. 2–3.

    Sub-layers carry vit_jax's raw checkpoint names (`LayerNorm_0`, `MultiHeadDotProductAttention_1`,
    `LayerNorm_2`, `MlpBlock_3`). The attention is `keras.layers.MultiHeadAttention`, whose q/k/v
    kernels `(D, heads, D/heads)` and output kernel `(heads, D/heads, D)` are Google's shapes as is.

    Call with `return_attention_scores=True` to also get the `(batch, heads, tokens, tokens)`
    attention weights; the default call keeps the layer's `ops.dot_product_attention` path (flash attention
    where the backend has it). A fused q/k/v projection and an explicit einsum softmax measured no faster on
    ViT-B/16 shapes (`scripts/benchmark.py --suite attention`), so the Keras layer stays.

    Example:
        >>> block = TransformerBlock(num_heads=2, mlp_dim=32)
        >>> y, scores = block(keras.ops.zeros((1, 5, 8)), return_attention_scores=True)
        >>> tuple(scores.shape)
        (1, 2, 5, 5)
    """

    def __init__(
        self,
        num_heads: int,
        mlp_dim: int,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        layer_norm_epsilon: float = 1e-6,
        gelu_approximate: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.gelu_approximate = bool(gelu_approximate)
        self.norm_1 = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="LayerNorm_0"
        )
        self.norm_2 = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="LayerNorm_2"
        )
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
        self.mlp = MlpBlock(
            self.mlp_dim,
            dropout_rate=self.dropout_rate,
            gelu_approximate=self.gelu_approximate,
            dtype=self.dtype_policy,
            name="MlpBlock_3",
        )

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        if hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {hidden_size} is not divisible by num_heads {self.num_heads}; "
                f"choose num_heads among the divisors of {hidden_size}."
            )
        self.attention = keras.layers.MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=hidden_size // self.num_heads,
            dropout=self.attention_dropout_rate,
            kernel_initializer="glorot_uniform",
            dtype=self.dtype_policy,
            name="MultiHeadDotProductAttention_1",
        )
        self.norm_1.build(input_shape)
        self.attention.build(input_shape, input_shape)
        self.norm_2.build(input_shape)
        self.mlp.build(input_shape)

    def call(self, x, training=None, return_attention_scores=False):
        y = self.norm_1(x)
        if return_attention_scores:
            y, scores = self.attention(y, y, return_attention_scores=True, training=training)
        else:
            y = self.attention(y, y, training=training)
        x = x + self.dropout(y, training=training)
        x = x + self.mlp(self.norm_2(x), training=training)
        return (x, scores) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "gelu_approximate": self.gelu_approximate,
        }
