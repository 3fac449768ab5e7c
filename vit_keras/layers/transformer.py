"""The pre-LayerNorm Transformer encoder block of the paper (vit_jax `Encoder1DBlock`), with the family's options."""

from __future__ import annotations

import math

import keras
from keras import ops

from vit_keras.configs import MLPS, BlockConfig, translate_aliases, whole_or_keywords
from vit_keras.layers import attention_path as attention_paths
from vit_keras.layers.checkpoint import nested, plain
from vit_keras.layers.dtypes import SublayerPolicies
from vit_keras.layers.norms import norm_layer
from vit_keras.layers.rope import LAYOUTS, rotate_tokens, rotation_tables, split_tables
from vit_keras.layers.swiglu import SwiGLUBlock

MLP_KINDS = MLPS  # the config's vocabulary
# The keywords a `TransformerBlock` takes as its block's fields: `BlockConfig`'s, and the older `gelu_approximate`.
BLOCK_ARGUMENTS = (*BlockConfig.__dataclass_fields__, "gelu_approximate")

QUICK_GELU_SCALE = 1.702
# The tanh GELU 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) is x·sigmoid(2·√(2/π)·(x + 0.044715·x³)), since
# 1 + tanh(z) = 2·sigmoid(2z): the same function, written with the two factors of its sigmoid argument.
GELU_TANH_LINEAR = 2 * math.sqrt(2 / math.pi)
GELU_TANH_CUBIC = GELU_TANH_LINEAR * 0.044715
HALF_PRECISION = ("bfloat16", "float16")


def _torch_compiling_on_cpu(x) -> bool:
    import torch

    return torch.compiler.is_compiling() and x.device.type == "cpu"


def gelu_tanh(x):
    """The tanh-approximated GELU (Google's checkpoints), in the form each backend computes fastest.

    Measured on [16, 197, 3072] (ViT-B/16's MLP) on an AMX Xeon, docs/performance.md: under `torch.compile` on
    CPU the sigmoid form x·sigmoid(x·(a + b·x²)) is one fused kernel 2x faster than the tanh form in bfloat16
    (12.5 against 25.8 ms) and 1.5x in float32; eager PyTorch keeps its own tanh-GELU kernel, which beats the
    several ops of the sigmoid form. TensorFlow and JAX compute a bfloat16/float16 input in float32 and round once:
    1.5x (TensorFlow) and 2x (JAX) faster than their tanh GELU in bfloat16, which rounds after each of its ops.
    Every form is the same function: outputs agree within the input precision's rounding.

    Example:
        >>> round(float(gelu_tanh(keras.ops.ones(()))), 4)
        0.8412
    """
    backend = keras.backend.backend()
    if backend == "torch" and _torch_compiling_on_cpu(x):
        return x * ops.sigmoid(x * (GELU_TANH_LINEAR + GELU_TANH_CUBIC * ops.square(x)))
    dtype = keras.backend.standardize_dtype(x.dtype)
    if backend in ("tensorflow", "jax") and dtype in HALF_PRECISION:
        return ops.cast(ops.gelu(ops.cast(x, "float32"), approximate=True), dtype)
    return ops.gelu(x, approximate=True)


# Each activation name of the configs (`configs.ACTIVATIONS`) and the function it is.
ACTIVATION_FUNCTIONS = {
    "gelu_tanh": gelu_tanh,
    "gelu": lambda x: ops.gelu(x, approximate=False),  # exact erf
    "quick_gelu": lambda x: x * ops.sigmoid(QUICK_GELU_SCALE * x),  # OpenAI CLIP
}


def apply_activation(x, activation: str):
    """`"gelu_tanh"` (`gelu_tanh`), `"gelu"` (exact erf) or `"quick_gelu"` (x·sigmoid(1.702x), OpenAI CLIP). The
    configs validate the name; a layer built on its own with another name fails here, on its first call.

    Example:
        >>> float(apply_activation(keras.ops.zeros(()), "quick_gelu"))
        0.0
    """
    function = ACTIVATION_FUNCTIONS.get(activation)
    if function is None:
        raise ValueError(f"`activation` must be one of {tuple(ACTIVATION_FUNCTIONS)}, got {activation!r}.")
    return function(x)


@keras.saving.register_keras_serializable(package="vit_keras")
class MlpBlock(SublayerPolicies, keras.layers.Layer):
    """`Dense(mlp_dim) → activation → dropout → Dense(D) → dropout`, named like vit_jax (`Dense_0`, `Dense_1`).

    `activation`: `"gelu_tanh"` (Google's checkpoints), `"gelu"` (exact erf: timm, transformers) or
    `"quick_gelu"` (OpenAI CLIP). The layer configs of earlier files, which say `gelu_approximate=True/False`
    instead, are read through `vit_keras.configs.translate_aliases` (`from_config`).

    Example:
        >>> tuple(MlpBlock(mlp_dim=32)(keras.ops.zeros((2, 5, 8))).shape)
        (2, 5, 8)
    """

    def __init__(self, mlp_dim: int, dropout_rate: float = 0.0, activation: str = "gelu_tanh", **kwargs):
        super().__init__(**kwargs)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.activation = activation
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
        x = apply_activation(self.dense_0(x), self.activation)
        x = self.dropout(x, training=training)
        x = self.dense_1(x)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        return input_shape

    def checkpoint_variables(self):
        return {**nested("Dense_0", self.dense_0), **nested("Dense_1", self.dense_1)}

    def get_config(self):
        return {
            **super().get_config(),
            "mlp_dim": self.mlp_dim,
            "dropout_rate": self.dropout_rate,
            "activation": self.activation,
        }

    @classmethod
    def from_config(cls, config):
        config = translate_aliases(config)  # earlier files: gelu_approximate, and activation None beside it
        if config.get("activation") is None:
            config.pop("activation", None)
        return super().from_config(config)


@keras.saving.register_keras_serializable(package="vit_keras")
class LayerScale(keras.layers.Layer):
    """A learned per-channel scale on a residual branch (CaiT/DINOv2 LayerScale; timm `ls1.gamma`).

    Example:
        >>> tuple(LayerScale(init_value=0.5)(keras.ops.ones((1, 2, 4))).shape)
        (1, 2, 4)
    """

    def __init__(self, init_value: float = 1e-5, **kwargs):
        super().__init__(**kwargs)
        self.init_value = float(init_value)

    def build(self, input_shape):
        self.scale = self.add_weight(
            name="scale", shape=(input_shape[-1],), initializer=keras.initializers.Constant(self.init_value)
        )

    def call(self, x):
        return x * ops.cast(self.scale, x.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def checkpoint_variables(self):
        return {"scale": plain(self.scale)}

    def get_config(self):
        return {**super().get_config(), "init_value": self.init_value}


@keras.saving.register_keras_serializable(package="vit_keras")
class ProjectionAttention(keras.layers.MultiHeadAttention):
    """`keras.layers.MultiHeadAttention` whose q/k/v projections may lack biases while the output keeps its own.

    `use_bias` decides the q/k/v biases only: the libraries' `qkv_bias=False` (timm, transformers' ViT/DINOv2)
    drops those and keeps the output projection's bias, whereas Keras' `use_bias=False` would drop all four.

    The attention itself takes the path `vit_keras.layers.attention_path` chooses for the backend and device
    (PyTorch's `scaled_dot_product_attention`, cuDNN flash attention on JAX GPUs, Keras' own elsewhere), or the
    one `attention_path=` names (`"einsum"`, `"keras"`, `"sdpa"`, `"cudnn"`). `return_attention_scores=True` and
    attention dropout take the explicit einsum path, which has the weights. After a call, `attention_path_taken`
    names the path that ran.

    Example:
        >>> mha = ProjectionAttention(2, 4, use_bias=False); mha.build((1, 3, 8), (1, 3, 8))
        >>> mha.query_dense.bias is None, mha.output_dense.bias is not None
        (True, True)
        >>> _ = mha(keras.ops.zeros((1, 3, 8)), keras.ops.zeros((1, 3, 8))); mha.attention_path_taken
        'keras'
    """

    def __init__(self, num_heads, key_dim, attention_path: str | None = None, **kwargs):
        super().__init__(num_heads, key_dim, **kwargs)
        self.attention_path = None if attention_path is None else attention_paths.check(attention_path)
        self.attention_path_taken = None

    def _make_output_dense(self, query_shape, common_kwargs, name=None):
        use_bias, self._use_bias = self._use_bias, True
        try:
            return super()._make_output_dense(query_shape, common_kwargs, name)
        finally:
            self._use_bias = use_bias

    def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                           return_attention_scores=False, use_causal_mask=False):
        if return_attention_scores or self._dropout > 0.0 or use_causal_mask:  # Keras' explicit scores
            self._took("einsum")
            return super()._compute_attention(query, key, value, attention_mask, training, return_attention_scores,
                                              use_causal_mask)
        choice = attention_paths.for_call(keras.backend.backend(), keras.backend.standardize_dtype(query.dtype),
                                          query.shape[-1], attention_mask is not None, self.attention_path)
        self._took(choice.path)
        if choice.path == "einsum":
            output, _ = super()._compute_attention(query, key, value, attention_mask, training, True)
            return output, None
        if choice.path == "keras":
            return super()._compute_attention(query, key, value, attention_mask, training)
        if choice.path == "sdpa":
            # (batch, [queries,] keys) -> (batch, heads, queries, keys), broadcast over heads and queries.
            mask = None if attention_mask is None else ops.cast(attention_mask, "bool")
            while mask is not None and len(mask.shape) < 4:
                mask = ops.expand_dims(mask, 1)
            return attention_paths.sdpa(query, key, value, self._inverse_sqrt_key_dim, mask), None
        platform, capability = attention_paths.device("jax")
        refusal = attention_paths.cudnn_refusal(platform, capability, keras.backend.standardize_dtype(query.dtype),
                                                query.shape[-1], attention_mask is not None)
        if refusal:
            raise ValueError(f"attention_path='cudnn' cannot run here: {refusal}. Leave it unset for the automatic "
                             "choice, or choose 'keras'.")
        return attention_paths.padded_attention(query, key, value, self._inverse_sqrt_key_dim), None

    def _took(self, path):
        if self.attention_path_taken != path:  # set once: no attribute write inside later compiled calls
            self.attention_path_taken = path

    def get_config(self):
        config = super().get_config()
        if self.attention_path is not None:  # saved only when chosen by hand: a loaded model re-chooses
            config["attention_path"] = self.attention_path
        return config


class Float32Rope:
    """Keeps a layer's `rope=` call argument (the RoPE tables) as given: Keras casts every floating call argument to
    the compute dtype (bfloat16 under a mixed policy), and the rotation is computed in float32 from float32 tables,
    as timm computes it. Every other argument is converted as Keras converts it."""

    def _keep_rope_float32(self):
        self._convert_input_args = False

    def __call__(self, *args, rope=None, **kwargs):
        def convert(x):
            return self.dtype_policy.convert_input(x, self.autocast, self.input_dtype)

        args, kwargs = keras.tree.map_structure(convert, args), keras.tree.map_structure(convert, kwargs)
        if rope is not None:
            kwargs["rope"] = self.dtype_policy.convert_input(rope, False, "float32")
        return super().__call__(*args, **kwargs)


@keras.saving.register_keras_serializable(package="vit_keras")
class RotaryAttention(Float32Rope, ProjectionAttention):
    """`ProjectionAttention` that rotates q and k of the patch tokens with 2-D RoPE tables after the projections.

    Called as `attention(query, value, rope=tables)` with `[sin | cos]` tables from `RotaryEmbedding2D`; the first
    `num_prefix_tokens` tokens (class token, registers) pass unrotated. Its variables are `ProjectionAttention`'s.

    Example:
        >>> import numpy as np
        >>> mha = RotaryAttention(2, 4, layout="interleaved", num_prefix_tokens=1)
        >>> y = mha(keras.ops.zeros((1, 5, 8)), keras.ops.zeros((1, 5, 8)), rope=np.zeros((4, 8), "float32"))
        >>> tuple(y.shape)
        (1, 5, 8)
    """

    def __init__(self, num_heads, key_dim, layout: str = "interleaved", num_prefix_tokens: int = 1, **kwargs):
        super().__init__(num_heads, key_dim, **kwargs)
        if layout not in LAYOUTS:
            raise ValueError(f"`layout` must be one of {LAYOUTS}, got {layout!r}.")
        self.layout = layout
        self.num_prefix_tokens = int(num_prefix_tokens)
        self._keep_rope_float32()

    def call(self, query, value, key=None, rope=None, return_attention_scores=False, training=None,
             attention_mask=None):
        if rope is None:
            raise ValueError(f"RotaryAttention {self.name!r} needs its RoPE tables: call it with `rope=`.")
        # The prefix rows and signs are put into the tables once for q and k (constants for a fixed grid).
        sin, cos = rotation_tables(*split_tables(rope), self.layout, self.num_prefix_tokens)
        query = rotate_tokens(self._query_dense(query), sin, cos, self.layout)
        key = rotate_tokens(self._key_dense(value if key is None else key), sin, cos, self.layout)
        value = self._value_dense(value)
        output, scores = self._compute_attention(query, key, value, attention_mask, training, return_attention_scores)
        output = self._output_dense(output)
        return (output, scores) if return_attention_scores else output

    def get_config(self):
        return {**super().get_config(), "layout": self.layout, "num_prefix_tokens": self.num_prefix_tokens}


def attention_checkpoint_variables(attention) -> dict:
    """The q/k/v/out variables of a `keras.layers.MultiHeadAttention` under vit_jax's names.

    Its q/k/v kernels `(D, heads, D/heads)` and output kernel `(heads, D/heads, D)` are Google's shapes as is; a
    projection built without a bias declares no `bias` name, so a checkpoint's bias has nowhere to go and is reported.

    Example:
        >>> mha = keras.layers.MultiHeadAttention(2, 4); mha.build((1, 3, 8), (1, 3, 8))
        >>> sorted(attention_checkpoint_variables(mha))[:2]
        ['key/bias', 'key/kernel']
    """
    parts = (("query", attention.query_dense), ("key", attention.key_dense), ("value", attention.value_dense),
             ("out", attention.output_dense))
    out = {}
    for name, dense in parts:
        out.update(nested(name, dense))
    return out


@keras.saving.register_keras_serializable(package="vit_keras")
class TransformerBlock(Float32Rope, SublayerPolicies, keras.layers.Layer):
    """`x + MHSA(LN(x))`, then `x + MLP(LN(x))`, as in the paper's Eq. 2–3 (each branch scaled with LayerScale).

    Sub-layers carry vit_jax's raw checkpoint names (`LayerNorm_0`, `MultiHeadDotProductAttention_1`,
    `LayerNorm_2`, `MlpBlock_3`; LayerScale: `LayerScale_1`, `LayerScale_3`, after the branch they scale). The
    attention is `keras.layers.MultiHeadAttention`, whose q/k/v kernels `(D, heads, D/heads)` and output kernel
    `(heads, D/heads, D)` are Google's shapes as is.

    Call with `return_attention_scores=True` to also get the `(batch, heads, tokens, tokens)`
    attention weights; the default call keeps the layer's `ops.dot_product_attention` path (flash attention
    where the backend has it). A fused q/k/v projection and an explicit einsum softmax measured no faster on
    ViT-B/16 shapes (`scripts/benchmark.py --suite attention`), so the Keras layer stays.

    `qkv_bias=False` builds the q/k/v projections without biases (timm and transformers `qkv_bias=False`); the
    output projection keeps its bias either way, as in those libraries.

    `query_tokens=n` computes the block for the first `n` tokens only: they still attend to every token (keys and
    values come from the whole sequence), and the output is `(batch, n, D)`. The last block of a classifier that
    reads only the class token gives the same logits this way for about a twelfth of the block's work. Calling
    with `all_tokens=True` computes every token anyway (the attention maps of `vit_keras.inspection`).

    Parts, chosen by name (the defaults are the paper's block, with its variables and names):

    - `mlp`: `"gelu"` (`MlpBlock` with `activation`), `"swiglu"` (`SwiGLUBlock`, split gate/value kernels) or
      `"swiglu_packed"` (one `Dense_0` holding [gate; value]); `mlp_norm` (`None`, `"layernorm"`, `"rmsnorm"`) adds a
      norm on a SwiGLU's hidden layer (EVA-02's sub-LN), `mlp_bias=False` drops the SwiGLU's biases (AIMv2).
    - `norm`: `"layernorm"` or `"rmsnorm"` for both block norms (their slots keep the names `LayerNorm_0`,
      `LayerNorm_2`), with `layer_norm_epsilon`.
    - `rope`: `None` or a 2-D RoPE layout (`"interleaved"`, `"rotate_half"`, `"mixed"`); the block is then called
      with `rope=tables` from a `RotaryEmbedding2D` (computed once for all blocks) and rotates q and k of all but its
      first `num_prefix_tokens` tokens. With `query_tokens` the queries are the first tokens of the rotated sequence.

    Called with `token_mask` (`(batch, tokens)`, true for real tokens: a NaFlex batch), the padding is masked out of
    the attention as keys, so that a real token's output does not depend on it. Called with `attention_mask`
    (`(batch, tokens, tokens)`, true where a query token may attend to a key token: EoMT's mask-guided attention),
    each query sees only its own keys.

    Example:
        >>> block = TransformerBlock(num_heads=2, mlp_dim=32)
        >>> y, scores = block(keras.ops.zeros((1, 5, 8)), return_attention_scores=True)
        >>> tuple(scores.shape)
        (1, 2, 5, 5)
    """

    def __init__(self, num_heads: int | None = None, mlp_dim: int | None = None, *, block: BlockConfig | None = None,
                 query_tokens: int | None = None, **kwargs):
        # The block's fields come whole (`block=config.block`, as `build_vit` passes them) or as keywords (the layer
        # on its own, and the configs of `.keras` files saved by 0.1.0, older names included).
        block = whole_or_keywords(BlockConfig, block, kwargs, argument="block", names=BLOCK_ARGUMENTS,
                                  num_heads=num_heads, mlp_dim=mlp_dim)
        super().__init__(**kwargs)
        self._keep_rope_float32()
        if query_tokens is not None and int(query_tokens) < 1:
            raise ValueError(f"`query_tokens` must be a positive number of tokens or None, got {query_tokens!r}.")
        self.block = block  # what the parts below read
        self.query_tokens = None if query_tokens is None else int(query_tokens)
        self.norm_1 = norm_layer(block.norm, block.layer_norm_epsilon, dtype=self.dtype_policy, name="LayerNorm_0")
        self.norm_2 = norm_layer(block.norm, block.layer_norm_epsilon, dtype=self.dtype_policy, name="LayerNorm_2")
        self.dropout = keras.layers.Dropout(block.dropout_rate, dtype=self.dtype_policy)
        if block.mlp == "gelu":
            self.mlp = MlpBlock(block.mlp_dim, dropout_rate=block.dropout_rate, activation=block.activation,
                                dtype=self.dtype_policy, name="MlpBlock_3")
        else:
            self.mlp = SwiGLUBlock(block.mlp_dim, packed=block.mlp == "swiglu_packed", norm=block.mlp_norm,
                                   norm_epsilon=block.layer_norm_epsilon, use_bias=block.mlp_bias,
                                   dropout_rate=block.dropout_rate, dtype=self.dtype_policy, name="MlpBlock_3")
        if block.layer_scale:
            self.scale_1 = LayerScale(dtype=self.dtype_policy, name="LayerScale_1")
            self.scale_3 = LayerScale(dtype=self.dtype_policy, name="LayerScale_3")

    def build(self, input_shape):
        hidden_size, block = input_shape[-1], self.block
        if hidden_size % block.num_heads:
            raise ValueError(
                f"hidden_size {hidden_size} is not divisible by num_heads {block.num_heads}; "
                f"choose num_heads among the divisors of {hidden_size}."
            )
        rope = {} if block.rope is None else {"layout": block.rope, "num_prefix_tokens": block.num_prefix_tokens}
        self.attention = (ProjectionAttention if block.rope is None else RotaryAttention)(
            **rope,
            num_heads=block.num_heads,
            key_dim=hidden_size // block.num_heads,
            use_bias=block.qkv_bias,
            dropout=block.attention_dropout_rate,
            kernel_initializer="glorot_uniform",
            dtype=self.dtype_policy,
            name="MultiHeadDotProductAttention_1",
        )
        query_shape = self.compute_output_shape(input_shape)
        self.norm_1.build(input_shape)
        self.attention.build(query_shape, input_shape)
        self.norm_2.build(query_shape)
        self.mlp.build(query_shape)
        if block.layer_scale:
            self.scale_1.build(query_shape)
            self.scale_3.build(query_shape)

    def call(self, x, training=None, return_attention_scores=False, all_tokens=False, rope=None, token_mask=None,
             attention_mask=None):
        if (rope is None) != (self.block.rope is None):
            raise ValueError(
                f"TransformerBlock {self.name!r} was built with rope={self.block.rope!r} but called with"
                f"{'out' if rope is None else ''} RoPE tables; pass `rope=` the output of a RotaryEmbedding2D exactly "
                "when the block has a RoPE layout."
            )
        attention_args = {} if rope is None else {"rope": rope}
        if token_mask is not None and attention_mask is not None:
            raise ValueError(f"TransformerBlock {self.name!r}: pass `token_mask` or `attention_mask`, not both.")
        if token_mask is not None:
            attention_args["attention_mask"] = ops.cast(token_mask, "bool")[:, None, :]
        if attention_mask is not None:
            attention_args["attention_mask"] = ops.cast(attention_mask, "bool")
        y = self.norm_1(x)
        query = y
        if self.query_tokens is not None and not all_tokens:
            # LayerNorm is per token, so normalising the whole sequence once serves the keys, values and queries.
            x, query = x[:, : self.query_tokens], y[:, : self.query_tokens]
        if return_attention_scores:
            y, scores = self.attention(query, y, return_attention_scores=True, training=training,
                                       **attention_args)
        else:
            y = self.attention(query, y, training=training, **attention_args)
        y = self.dropout(y, training=training)
        x = x + (self.scale_1(y) if self.block.layer_scale else y)
        y = self.mlp(self.norm_2(x), training=training)
        x = x + (self.scale_3(y) if self.block.layer_scale else y)
        return (x, scores) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        if self.query_tokens is None:
            return input_shape
        return (input_shape[0], self.query_tokens, *input_shape[2:])

    def checkpoint_variables(self):
        out = {**nested("LayerNorm_0", self.norm_1), **nested("LayerNorm_2", self.norm_2),
               **nested("MlpBlock_3", self.mlp)}
        out.update({f"MultiHeadDotProductAttention_1/{k}": v
                    for k, v in attention_checkpoint_variables(self.attention).items()})
        if self.block.layer_scale:
            out.update({**nested("LayerScale_1", self.scale_1), **nested("LayerScale_3", self.scale_3)})
        return out

    def get_config(self):
        return {**super().get_config(), "block": self.block.to_dict(), "query_tokens": self.query_tokens}
