"""torch `Linear`/`Conv2d`/`LayerNorm` arrays -> the canonical vit_jax layouts, shared by the timm and transformers
readers.

torch stores Linear weights as (out, in) and convolutions as OIHW; vit_jax stores kernels (in, out), the patch
kernel (P, P, C, D), and the attention projections per head: q/k/v kernels (D, heads, D/heads) with (heads, D/heads)
biases, the output kernel (heads, D/heads, D).

Example:
    >>> sorted(linear("head", np.zeros((3, 2)), np.zeros(3)))
    ['head/bias', 'head/kernel']
"""

from __future__ import annotations

import numpy as np


def linear(prefix: str, weight, bias=None) -> dict:
    """A torch Linear as `{prefix}/kernel` (in, out) and `{prefix}/bias`.

    Example:
        >>> linear("x", np.zeros((3, 2)))["x/kernel"].shape
        (2, 3)
    """
    out = {f"{prefix}/kernel": np.asarray(weight, np.float32).T}
    if bias is not None:
        out[f"{prefix}/bias"] = np.asarray(bias, np.float32)
    return out


def norm(prefix: str, weight, bias) -> dict:
    """A torch LayerNorm as `{prefix}/scale` and `{prefix}/bias`.

    Example:
        >>> sorted(norm("n", np.ones(2), np.zeros(2)))
        ['n/bias', 'n/scale']
    """
    return {f"{prefix}/scale": np.asarray(weight, np.float32), f"{prefix}/bias": np.asarray(bias, np.float32)}


def patch_kernel(weight) -> np.ndarray:
    """A torch patch convolution (D, C, P, P) as Google's (P, P, C, D).

    Example:
        >>> patch_kernel(np.zeros((8, 3, 4, 4))).shape
        (4, 4, 3, 8)
    """
    return np.asarray(weight, np.float32).transpose(2, 3, 1, 0)


def attention(prefix: str, q, k, v, out, num_heads: int) -> dict:
    """Attention projections (each a `(weight, bias or None)` torch pair) in vit_jax's per-head layout.

    A missing q/k/v bias (`qkv_bias=False`) is a zero bias, the same function.

    Example:
        >>> w = np.zeros((4, 4))
        >>> attention("a", (w, None), (w, None), (w, None), (w, None), 2)["a/query/kernel"].shape
        (4, 2, 2)
    """
    hidden = int(np.asarray(q[0]).shape[1])
    if hidden % num_heads:
        raise ValueError(f"Hidden size {hidden} is not divisible by num_heads {num_heads}.")
    head_dim = hidden // num_heads
    params = {}
    for name, (weight, bias) in (("query", q), ("key", k), ("value", v)):
        weight = np.asarray(weight, np.float32)
        params[f"{prefix}/{name}/kernel"] = weight.T.reshape(hidden, num_heads, weight.shape[0] // num_heads)
        bias = np.zeros(weight.shape[0], np.float32) if bias is None else np.asarray(bias, np.float32)
        params[f"{prefix}/{name}/bias"] = bias.reshape(num_heads, -1)
    weight, bias = out
    weight = np.asarray(weight, np.float32)
    params[f"{prefix}/out/kernel"] = weight.T.reshape(num_heads, head_dim, weight.shape[0])
    params[f"{prefix}/out/bias"] = (np.zeros(weight.shape[0], np.float32) if bias is None
                                    else np.asarray(bias, np.float32))
    return params


def split_fused(weight, bias, parts: int):
    """Split a fused projection (`qkv`: parts=3, `kv`: parts=2) along its output axis into (weight, bias) pairs.

    Example:
        >>> len(split_fused(np.zeros((6, 2)), None, 3))
        3
    """
    weights = np.split(np.asarray(weight, np.float32), parts, axis=0)
    biases = [None] * parts if bias is None else np.split(np.asarray(bias, np.float32), parts, axis=0)
    return list(zip(weights, biases))
