"""The table of Vision Transformer variants from the paper (and the AugReg hybrids).

One frozen dataclass per row; nothing else lives here so that every other module can import it.

Example:
    >>> from vit_keras.configs import VARIANTS
    >>> VARIANTS["B/16"].hidden_size
    768
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class ResNetConfig:
    """The ResNet (BiT-style) stem of a hybrid: bottleneck units per stage and a width multiplier.

    Example:
        >>> ResNetConfig(num_layers=(3, 4, 9)).width
        64
    """

    num_layers: tuple[int, ...] = ()
    width_factor: int = 1

    @property
    def width(self) -> int:
        return int(64 * self.width_factor)

    @classmethod
    def from_any(cls, value: ResNetConfig | Mapping | None) -> ResNetConfig | None:
        """Accept a `ResNetConfig`, a dict such as `{"num_layers": [3, 4, 9], "width_factor": 1}`, or None.

        Example:
            >>> ResNetConfig.from_any({"num_layers": [2, 2], "width_factor": 1}).num_layers
            (2, 2)
        """
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"num_layers", "width_factor"}
            if unknown:
                raise ValueError(
                    f"`resnet` has unknown keys {sorted(unknown)}; pass "
                    "{'num_layers': [3, 4, 9], 'width_factor': 1} or a vit_keras.configs.ResNetConfig."
                )
            num_layers = value.get("num_layers", ())
            if not isinstance(num_layers, Sequence) or not all(
                isinstance(n, int) and n >= 1 for n in num_layers
            ):
                raise ValueError(
                    f"`resnet['num_layers']` must be a list of positive unit counts per stage, got {num_layers!r}."
                )
            width_factor = value.get("width_factor", 1)
            if not isinstance(width_factor, int) or width_factor < 1:
                raise ValueError(f"`resnet['width_factor']` must be a positive int, got {width_factor!r}.")
            return cls(num_layers=tuple(num_layers), width_factor=width_factor)
        raise ValueError(
            f"`resnet` must be None, a dict like {{'num_layers': [3, 4, 9], 'width_factor': 1}} or a "
            f"ResNetConfig, got {type(value).__name__}."
        )

    def to_dict(self) -> dict:
        return {"num_layers": list(self.num_layers), "width_factor": self.width_factor}


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """One row of the variant table (vit_jax `configs/models.py`).

    Example:
        >>> VARIANTS["L/16"].num_layers
        24
    """

    name: str
    patch_size: int
    hidden_size: int
    mlp_dim: int
    num_heads: int
    num_layers: int
    resnet: ResNetConfig | None = None
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0

    def model_kwargs(self) -> dict:
        """Keyword arguments for `vit_keras.ViT` that rebuild this variant."""
        return {
            "patch_size": self.patch_size,
            "hidden_size": self.hidden_size,
            "mlp_dim": self.mlp_dim,
            "num_heads": self.num_heads,
            "num_layers": self.num_layers,
            "resnet": self.resnet,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
        }


def _row(name, patch, hidden, mlp, heads, layers, resnet=None, dropout=0.0):
    return ViTConfig(name, patch, hidden, mlp, heads, layers, resnet=resnet, dropout_rate=dropout)


VARIANTS: dict[str, ViTConfig] = {
    c.name: c
    for c in (
        _row("Ti/16", 16, 192, 768, 3, 12),
        _row("S/16", 16, 384, 1536, 6, 12),
        _row("S/32", 32, 384, 1536, 6, 12),
        _row("B/8", 8, 768, 3072, 12, 12),
        _row("B/16", 16, 768, 3072, 12, 12),
        _row("B/32", 32, 768, 3072, 12, 12),
        _row("L/16", 16, 1024, 4096, 16, 24, dropout=0.1),
        _row("L/32", 32, 1024, 4096, 16, 24),
        _row("H/14", 14, 1280, 5120, 16, 32, dropout=0.1),
        # Hybrids: the patch size applies to the ResNet feature map, not to the image.
        _row("R+Ti/16", 8, 192, 768, 3, 12, resnet=ResNetConfig(())),
        _row("R26+S/32", 1, 384, 1536, 6, 12, resnet=ResNetConfig((2, 2, 2, 2))),
        _row("R50+B/16", 1, 768, 3072, 12, 12, resnet=ResNetConfig((3, 4, 9)), dropout=0.1),
        _row("R26+B/32", 1, 768, 3072, 12, 12, resnet=ResNetConfig((2, 2, 2, 2))),
        _row("R50+L/32", 1, 1024, 4096, 16, 24, resnet=ResNetConfig((3, 4, 6, 3)), dropout=0.1),
    )
}
