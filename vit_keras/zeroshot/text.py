"""The text towers of CLIP, SigLIP and SigLIP 2 as Keras layers: token + position embedding, the vision side's
pre-LN `TransformerBlock` with a causal and/or padding mask, a final LayerNorm, the pooling rule, a projection.

Example:
    >>> from vit_keras.zeroshot.text_config import TextConfig
    >>> config = TextConfig(vocab_size=50, context_length=6, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
    ...                     activation="quick_gelu", causal=True, use_attention_mask=True, pooling="first_eos",
    ...                     eos_token_id=49, projection_dim=8, projection_bias=False)
    >>> model = text_model(config)
    >>> ids = np.array([[48, 5, 49, 49, 49, 49]], "int32")
    >>> tuple(model({"token_ids": ids, "attention_mask": np.array([[1, 1, 1, 0, 0, 0]], "int32")}).shape)
    (1, 8)
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras.layers import CheckpointVariable, TransformerBlock, checkpoint_variables
from vit_keras.zeroshot.text_config import POOLINGS, TextConfig

TOKEN_IDS = "token_ids"
ATTENTION_MASK = "attention_mask"


@keras.saving.register_keras_serializable(package="vit_keras.zeroshot")
class TextEmbedding(keras.layers.Layer):
    """Token embedding plus a learned position embedding of `context_length` rows (the first `T` used for `T`
    tokens), as transformers' `CLIPTextEmbeddings` / `SiglipTextEmbeddings`.

    Example:
        >>> tuple(TextEmbedding(10, 4, 8)(np.zeros((2, 3), "int32")).shape)
        (2, 3, 8)
    """

    def __init__(self, vocab_size: int, context_length: int, hidden_size: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.context_length, self.hidden_size = int(vocab_size), int(context_length), int(hidden_size)

    def build(self, input_shape):
        init = keras.initializers.RandomNormal(stddev=0.02)
        self.token_embedding = self.add_weight(name="token_embedding", shape=(self.vocab_size, self.hidden_size),
                                               initializer=init)
        self.position_embedding = self.add_weight(name="position_embedding",
                                                  shape=(self.context_length, self.hidden_size), initializer=init)

    def call(self, token_ids):
        length = ops.shape(token_ids)[1]
        tokens = ops.take(self.token_embedding, ops.cast(token_ids, "int32"), axis=0)
        positions = ops.slice(ops.convert_to_tensor(self.position_embedding), (0, 0), (length, self.hidden_size))
        return tokens + ops.cast(positions, tokens.dtype)[None]

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.hidden_size)

    def checkpoint_variables(self):
        return {name: CheckpointVariable(variable, tuple(variable.shape))
                for name, variable in (("token_embedding", self.token_embedding),
                                       ("position_embedding", self.position_embedding))}

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "context_length": self.context_length,
                "hidden_size": self.hidden_size}


def attention_mask(length, causal: bool, padding_mask=None):
    """The boolean (batch or 1, T, T) mask of who a query may attend to: earlier tokens and itself (`causal`), real
    tokens only (`padding_mask`, (batch, T), 1 for a real token), both, or None for everyone.

    Example:
        >>> np.asarray(attention_mask(3, True)).astype(int)[0].tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    mask = None
    if causal:
        mask = ops.tril(ops.ones((length, length), "int32"))[None] > 0
    if padding_mask is not None:
        keys = ops.cast(padding_mask, "bool")[:, None, :]
        mask = keys if mask is None else ops.logical_and(mask, keys)
    return mask


@keras.saving.register_keras_serializable(package="vit_keras.zeroshot")
class TextBlock(TransformerBlock):
    """The vision side's pre-LN `TransformerBlock` (same parts and checkpoint names) with a text mask: `causal`
    (CLIP) and/or the padding mask it is called with (when `use_attention_mask`). It takes its `BlockConfig` as the
    vision block does: whole (`block=TextConfig.block`, as `text_model` passes it) or as keywords.

    Example:
        >>> block = TextBlock(num_heads=2, mlp_dim=16, causal=True, activation="quick_gelu")
        >>> x = np.random.default_rng(0).normal(size=(1, 4, 8)).astype("float32")
        >>> y = np.asarray(block(x, np.ones((1, 4), "int32")))
        >>> z = np.asarray(block(np.concatenate([x[:, :2], 0 * x[:, 2:]], 1), np.ones((1, 4), "int32")))
        >>> bool(np.allclose(y[:, :2], z[:, :2], atol=1e-6))  # causal: a token does not see later ones
        True
    """

    def __init__(self, causal: bool = False, use_attention_mask: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.causal, self.use_attention_mask = bool(causal), bool(use_attention_mask)

    def build(self, x_shape, padding_mask_shape=None):
        super().build(x_shape)

    def call(self, x, padding_mask=None, training=None):
        mask = attention_mask(ops.shape(x)[1], self.causal, padding_mask if self.use_attention_mask else None)
        y = self.norm_1(x)
        y = self.attention(y, y, attention_mask=mask, training=training)
        x = x + self.dropout(y, training=training)
        return x + self.mlp(self.norm_2(x), training=training)

    def compute_output_shape(self, x_shape, padding_mask_shape=None):
        return x_shape

    def get_config(self):
        return {**super().get_config(), "causal": self.causal, "use_attention_mask": self.use_attention_mask}


@keras.saving.register_keras_serializable(package="vit_keras.zeroshot")
class TextPooling(keras.layers.Layer):
    """One vector per text: at the first `eos_token_id` (`"first_eos"`, CLIP), at the largest token id
    (`"argmax"`, CLIP configs with the legacy eos_token_id 2) or at the last position (`"last"`, SigLIP).

    Example:
        >>> x = np.arange(12, dtype="float32").reshape(1, 4, 3)
        >>> np.asarray(TextPooling("first_eos", eos_token_id=7)(x, np.array([[5, 7, 7, 7]]))).tolist()
        [[3.0, 4.0, 5.0]]
    """

    def __init__(self, pooling: str, eos_token_id: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if pooling not in POOLINGS:
            raise ValueError(f"TextPooling: `pooling` must be one of {POOLINGS}, got {pooling!r}.")
        self.pooling, self.eos_token_id = pooling, None if eos_token_id is None else int(eos_token_id)

    def call(self, x, token_ids):
        if self.pooling == "last":
            return x[:, -1]
        ids = ops.cast(token_ids, "int32")
        # argmax of the boolean picks the first match (and position 0 when the text has none, as transformers).
        index = ops.argmax(ops.cast(ops.equal(ids, self.eos_token_id), "int32") if self.pooling == "first_eos"
                           else ids, axis=-1)
        index = ops.cast(index, "int32")[:, None, None]
        return ops.take_along_axis(x, index, axis=1)[:, 0]

    def compute_output_shape(self, x_shape, token_ids_shape=None):
        return (x_shape[0], x_shape[-1])

    def get_config(self):
        return {**super().get_config(), "pooling": self.pooling, "eos_token_id": self.eos_token_id}


def block_name(index: int) -> str:
    return f"text_block_{index}"


def text_model(config: TextConfig, name: str = "text_model") -> keras.Model:
    """The text tower as a Keras model: `{"token_ids", "attention_mask"}` (batch, T ≤ context_length) → the
    projected sentence features (batch, projection_dim), not normalised. SigLIP's tower takes the mask and, as its
    reference, ignores it.

    Example:
        >>> config = TextConfig(vocab_size=20, context_length=5, hidden_size=8, num_layers=2, num_heads=2,
        ...                     mlp_dim=16, projection_dim=4)
        >>> [layer.name for layer in text_model(config).layers if layer.weights]
        ['text_embedding', 'text_block_0', 'text_block_1', 'final_layer_norm', 'text_projection']
    """
    ids = keras.Input((None,), dtype="int32", name=TOKEN_IDS)
    mask = keras.Input((None,), dtype="int32", name=ATTENTION_MASK)
    x = TextEmbedding(config.vocab_size, config.context_length, config.hidden_size, name="text_embedding")(ids)
    for index in range(config.num_layers):
        x = TextBlock(block=config.block, causal=config.causal, use_attention_mask=config.use_attention_mask,
                      name=block_name(index))(x, mask)
    x = keras.layers.LayerNormalization(epsilon=config.layer_norm_epsilon, name="final_layer_norm")(x)
    x = TextPooling(config.pooling, config.eos_token_id, name="text_pooling")(x, ids)
    if config.projection_dim is not None:
        x = keras.layers.Dense(config.projection_dim, use_bias=config.projection_bias, name="text_projection")(x)
    return keras.Model({TOKEN_IDS: ids, ATTENTION_MASK: mask}, x, name=name)


def text_slots(model: keras.Model) -> dict:
    """`{canonical name: CheckpointVariable}` of a `text_model`: `text_embedding/token_embedding`,
    `text_block_{i}/LayerNorm_0/scale` (the vision block's names), `final_layer_norm/scale`,
    `text_projection/kernel`, ...

    Example:
        >>> config = TextConfig(vocab_size=20, context_length=5, hidden_size=8, num_layers=1, num_heads=2,
        ...                     mlp_dim=16, projection_dim=4, projection_bias=False)
        >>> sorted(text_slots(text_model(config)))[-3:]
        ['text_embedding/position_embedding', 'text_embedding/token_embedding', 'text_projection/kernel']
    """
    slots = {}
    for layer in model.layers:
        if layer.weights:
            slots.update({f"{layer.name}/{name}": slot for name, slot in checkpoint_variables(layer).items()})
    return slots
