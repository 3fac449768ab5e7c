"""The text tower's architecture: one frozen record read off a checkpoint's `text_config`, carried by the layers.

CLIP's text transformer is causal and pools the first end-of-text token; SigLIP's sees every position and pools
the last one; SigLIP 2's is SigLIP's with the tokenizer's attention mask passed to the attention.

Example:
    >>> config = TextConfig(vocab_size=100, context_length=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
    ...                     activation="quick_gelu", causal=True, pooling="first_eos", eos_token_id=99,
    ...                     projection_dim=12, projection_bias=False)
    >>> TextConfig.from_dict(config.to_dict()) == config
    True
"""

from __future__ import annotations

import dataclasses

from vit_keras.configs import BlockConfig

# Where the text tower reads its sentence embedding: the first end-of-text token (CLIP), the largest token id
# (CLIP checkpoints whose config says eos_token_id 2, transformers' legacy rule: `<|endoftext|>` has the largest id),
# the last position (SigLIP, SigLIP 2: the tokenizer pads to the context length).
POOLINGS = ("first_eos", "argmax", "last")
TEXT_ACTIVATIONS = ("quick_gelu", "gelu", "gelu_tanh")


@dataclasses.dataclass(frozen=True)
class TextConfig:
    """The text tower's sizes and switches.

    `causal`: each token sees itself and earlier tokens only (CLIP). `use_attention_mask`: the tokenizer's mask
    hides the padding from the attention (CLIP, SigLIP 2; SigLIP's reference passes none). `projection_dim`: the
    width of the final Linear (`text_projection`, no bias, for CLIP; `head`, with bias, for SigLIP).

    Example:
        >>> TextConfig(vocab_size=10, context_length=4, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=16,
        ...            pooling="middle").pooling
        Traceback (most recent call last):
        ...
        ValueError: TextConfig: `pooling` must be one of ('first_eos', 'argmax', 'last'), got 'middle'.
    """

    vocab_size: int
    context_length: int
    hidden_size: int
    num_layers: int
    num_heads: int
    mlp_dim: int
    activation: str = "gelu_tanh"
    layer_norm_epsilon: float = 1e-6
    causal: bool = False
    use_attention_mask: bool = False
    pooling: str = "last"
    eos_token_id: int | None = None
    projection_dim: int | None = None
    projection_bias: bool = True

    def __post_init__(self):
        for name in ("vocab_size", "context_length", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"TextConfig: `{name}` must be a positive integer, got {value!r}.")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"TextConfig: hidden_size {self.hidden_size} is not divisible by num_heads "
                             f"{self.num_heads}; check the checkpoint's text_config.")
        if self.activation not in TEXT_ACTIVATIONS:
            raise ValueError(f"TextConfig: `activation` must be one of {TEXT_ACTIVATIONS}, got {self.activation!r}.")
        if self.pooling not in POOLINGS:
            raise ValueError(f"TextConfig: `pooling` must be one of {POOLINGS}, got {self.pooling!r}.")
        if self.pooling == "first_eos" and self.eos_token_id is None:
            raise ValueError("TextConfig: pooling 'first_eos' needs `eos_token_id` (the end-of-text token's id).")
        # What each text block reads (the vision side's block, which `TextBlock` takes whole), made once.
        object.__setattr__(self, "_block", BlockConfig(num_heads=self.num_heads, mlp_dim=self.mlp_dim,
                                                       activation=self.activation,
                                                       layer_norm_epsilon=self.layer_norm_epsilon))

    @property
    def block(self) -> BlockConfig:
        """The fields each text block reads, as the vision side's `TransformerBlock` takes them.

        Example:
            >>> TextConfig(vocab_size=10, context_length=4, hidden_size=8, num_layers=1, num_heads=2,
            ...            mlp_dim=16, activation="quick_gelu").block.activation
            'quick_gelu'
        """
        return self._block

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TextConfig:
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"TextConfig: unknown fields {unknown}; the fields are {sorted(known)}.")
        return cls(**values)
