"""Read timm `VisionTransformer` state dicts saved as `.safetensors` (no torch needed).

timm fuses q, k and v into `attn.qkv` ((3D, D), q first) and stores torch layouts: Linear weights (out, in), the
patch convolution OIHW. The number of heads is not in the file; it comes from the model being loaded (or, for
conversion, from the variant table). timm's ViTs use exact-erf GELU and LayerNorm eps 1e-6.

Example:
    >>> params = read_timm("vit_base_patch16_224.safetensors", num_heads=12)  # doctest: +SKIP
"""

from __future__ import annotations

import re

import numpy as np

from vit_keras.weights.google import POS_EMBEDDING_KEY
from vit_keras.weights.safetensors_io import read_safetensors

_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)\.(weight|bias)$")
_BLOCK_MAP = {
    "norm1": "LayerNorm_0",
    "norm2": "LayerNorm_2",
    "mlp.fc1": "MlpBlock_3/Dense_0",
    "mlp.fc2": "MlpBlock_3/Dense_1",
}
_UNSUPPORTED = {
    "reg_token": "register tokens",
    "fc_norm.": "a LayerNorm after pooling (fc_norm)",
    "norm_pre.": "a LayerNorm before the blocks (norm_pre)",
    "attn_pool.": "attention pooling (MAP head)",
    "patch_embed.backbone.": "a timm hybrid backbone (load the Google .npz of the hybrid instead)",
    ".ls1.": "LayerScale",
    ".q_norm.": "q/k normalisation",
}


def looks_like_timm(names) -> bool:
    """Whether tensor names follow timm's ViT layout.

    Example:
        >>> looks_like_timm(["blocks.0.attn.qkv.weight"])
        True
    """
    return any(name.startswith(("blocks.", "patch_embed.")) for name in names)


def canonicalize(tensors: dict[str, np.ndarray], num_heads: int) -> dict[str, np.ndarray]:
    """timm ViT tensors -> the canonical vit_jax raw-name dict.

    Example:
        >>> canonicalize(read_safetensors("vit.safetensors"), num_heads=12)  # doctest: +SKIP
    """
    for name in tensors:
        for marker, what in _UNSUPPORTED.items():
            if marker in name or name.startswith(marker):
                raise ValueError(f"This timm checkpoint uses {what} ({name!r}), which vit_keras does not implement.")
    out: dict[str, np.ndarray] = {}
    unknown = []
    for name, value in tensors.items():
        value = np.asarray(value, np.float32)
        if name == "cls_token":
            out["cls"] = value
        elif name == "pos_embed":
            out[POS_EMBEDDING_KEY] = value
        elif name == "patch_embed.proj.weight":
            out["embedding/kernel"] = value.transpose(2, 3, 1, 0)
        elif name == "patch_embed.proj.bias":
            out["embedding/bias"] = value
        elif name in ("norm.weight", "norm.bias"):
            out["Transformer/encoder_norm/" + ("scale" if name.endswith("weight") else "bias")] = value
        elif name.startswith(("head.", "pre_logits.fc.")):
            layer = "head" if name.startswith("head.") else "pre_logits"
            out[f"{layer}/" + ("kernel" if name.endswith("weight") else "bias")] = (
                value.T if name.endswith("weight") else value
            )
        elif match := _BLOCK.match(name):
            index, module, param = match.groups()
            prefix = f"Transformer/encoderblock_{index}"
            if module in _BLOCK_MAP:
                target = f"{prefix}/{_BLOCK_MAP[module]}"
                if module.startswith("norm"):
                    out[f"{target}/{'scale' if param == 'weight' else 'bias'}"] = value
                elif param == "weight":
                    out[f"{target}/kernel"] = value.T
                else:
                    out[f"{target}/bias"] = value
            elif module == "attn.qkv":
                for part, piece in zip(("query", "key", "value"), np.split(value, 3, axis=0)):
                    key = f"{prefix}/MultiHeadDotProductAttention_1/{part}"
                    dim = piece.shape[0]
                    if dim % num_heads:
                        raise ValueError(f"Hidden size {dim} is not divisible by num_heads {num_heads}.")
                    if param == "weight":
                        out[f"{key}/kernel"] = piece.T.reshape(piece.shape[1], num_heads, dim // num_heads)
                    else:
                        out[f"{key}/bias"] = piece.reshape(num_heads, dim // num_heads)
            elif module == "attn.proj":
                key = f"{prefix}/MultiHeadDotProductAttention_1/out"
                if param == "weight":
                    dim = value.shape[0]
                    out[f"{key}/kernel"] = value.T.reshape(num_heads, dim // num_heads, dim)
                else:
                    out[f"{key}/bias"] = value
            else:
                unknown.append(name)
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(f"Unknown timm ViT tensors (not a plain ViT?): {', '.join(sorted(unknown))}")
    return out


def read_timm(path: str, num_heads: int) -> dict[str, np.ndarray]:
    """Read a timm ViT `.safetensors` state dict into the canonical dict.

    Example:
        >>> read_timm("vit_small_patch16_224.safetensors", num_heads=6)["cls"].shape  # doctest: +SKIP
        (1, 1, 384)
    """
    return canonicalize(read_safetensors(path), num_heads)
