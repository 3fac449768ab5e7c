"""The SwiGLU MLP of the 2024-26 ViTs: `Dense_1(norm(silu(gate(x)) · value(x)))`.

Two storage forms, the same function:

- split (`packed=False`; timm `SwiGLU` `fc1_g`/`fc1_x`, transformers `gate_proj`/`up_proj`): `Dense_0_gate` and
  `Dense_0_value`, each `(D, hidden)`;
- packed (`packed=True`; timm `SwiGLUPacked` / `GluMlp(gate_last=False)` `fc1`): one `Dense_0` `(D, 2·hidden)` whose
  first half is the gate and second half the value.

`norm` (`None`, `"layernorm"`, `"rmsnorm"`) puts a norm on the hidden layer (EVA-02's sub-LN `mlp.norm`, declared
as `norm`); `use_bias=False` drops every bias (AIMv2).

Example:
    >>> tuple(SwiGLUBlock(mlp_dim=16, packed=True)(keras.ops.zeros((2, 5, 8))).shape)
    (2, 5, 8)
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras.layers.checkpoint import nested
from vit_keras.layers.dtypes import SublayerPolicies
from vit_keras.layers.norms import NORMS, norm_layer


@keras.saving.register_keras_serializable(package="vit_keras")
class SwiGLUBlock(SublayerPolicies, keras.layers.Layer):
    """SwiGLU MLP with `mlp_dim` hidden units (see the module docstring for the names and forms).

    Example:
        >>> mlp = SwiGLUBlock(mlp_dim=16, norm="layernorm"); mlp.build((None, 3, 8))
        >>> sorted(mlp.checkpoint_variables())[:3]
        ['Dense_0_gate/bias', 'Dense_0_gate/kernel', 'Dense_0_value/bias']
    """

    def __init__(self, mlp_dim: int, packed: bool = False, norm: str | None = None, norm_epsilon: float = 1e-6,
                 use_bias: bool = True, dropout_rate: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        if norm is not None and norm not in NORMS:
            raise ValueError(f"`norm` of a SwiGLU MLP must be None or one of {NORMS}, got {norm!r}.")
        self.mlp_dim = int(mlp_dim)
        self.packed = bool(packed)
        self.norm_kind = norm
        self.norm_epsilon = float(norm_epsilon)
        self.use_bias = bool(use_bias)
        self.dropout_rate = float(dropout_rate)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def _dense(self, units, name):
        return keras.layers.Dense(units, use_bias=self.use_bias, kernel_initializer="glorot_uniform",
                                  dtype=self.dtype_policy, name=name)

    def build(self, input_shape):
        hidden_shape = (*input_shape[:-1], self.mlp_dim)
        if self.packed:
            self.dense_in = self._dense(2 * self.mlp_dim, "Dense_0")
            self.dense_in.build(input_shape)
        else:
            self.dense_gate = self._dense(self.mlp_dim, "Dense_0_gate")
            self.dense_value = self._dense(self.mlp_dim, "Dense_0_value")
            self.dense_gate.build(input_shape)
            self.dense_value.build(input_shape)
        if self.norm_kind is not None:
            self.norm = norm_layer(self.norm_kind, self.norm_epsilon, dtype=self.dtype_policy, name="norm")
            self.norm.build(hidden_shape)
        self.dense_out = self._dense(input_shape[-1], "Dense_1")
        self.dense_out.build(hidden_shape)

    def call(self, x, training=None):
        if self.packed:
            gate, value = ops.split(self.dense_in(x), 2, axis=-1)
        else:
            gate, value = self.dense_gate(x), self.dense_value(x)
        x = ops.silu(gate) * value
        x = self.dropout(x, training=training)
        if self.norm_kind is not None:
            x = self.norm(x)
        x = self.dense_out(x)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        return input_shape

    def checkpoint_variables(self):
        if self.packed:
            out = nested("Dense_0", self.dense_in)
        else:
            out = {**nested("Dense_0_gate", self.dense_gate), **nested("Dense_0_value", self.dense_value)}
        if self.norm_kind is not None:
            out.update(nested("norm", self.norm))
        return {**out, **nested("Dense_1", self.dense_out)}

    def get_config(self):
        return {
            **super().get_config(),
            "mlp_dim": self.mlp_dim,
            "packed": self.packed,
            "norm": self.norm_kind,
            "norm_epsilon": self.norm_epsilon,
            "use_bias": self.use_bias,
            "dropout_rate": self.dropout_rate,
        }
