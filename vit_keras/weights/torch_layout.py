"""torch `Linear`/`Conv2d`/`LayerNorm` arrays -> the canonical vit_jax layouts (`vit_keras.weights.schema`), the
transforms of the timm and transformers tables (`vit_keras.weights.rules`).

torch stores Linear weights as (out, in) and convolutions as OIHW; vit_jax stores kernels (in, out), the patch
kernel (P, P, C, D), and the attention projections per head: q/k/v kernels (D, heads, D/heads) with (heads, D/heads)
biases, the output kernel (heads, D/heads, D).

Every function takes the canonical prefix, the torch weight and its bias (None: the source has none, and then the
result has no bias either: nothing is invented) and returns `{canonical name: float32 array}`.

Example:
    >>> sorted(linear("head", np.zeros((3, 2)), np.zeros(3)))
    ['head/bias', 'head/kernel']
"""

from __future__ import annotations

import numpy as np


def _f32(array) -> np.ndarray:
    return np.asarray(array, np.float32)


def _with_bias(out: dict, prefix: str, bias, shape=None) -> dict:
    if bias is not None:
        bias = _f32(bias)
        out[f"{prefix}/bias"] = bias if shape is None else bias.reshape(shape)
    return out


def linear(prefix: str, weight, bias=None) -> dict:
    """A torch Linear as `{prefix}/kernel` (in, out) and `{prefix}/bias`.

    Example:
        >>> linear("x", np.zeros((3, 2)))["x/kernel"].shape
        (2, 3)
    """
    return _with_bias({f"{prefix}/kernel": _f32(weight).T}, prefix, bias)


def norm(prefix: str, weight, bias=None) -> dict:
    """A torch LayerNorm as `{prefix}/scale` and `{prefix}/bias`.

    Example:
        >>> sorted(norm("n", np.ones(2), np.zeros(2)))
        ['n/bias', 'n/scale']
    """
    return _with_bias({f"{prefix}/scale": _f32(weight)}, prefix, bias)


def scale(prefix: str, weight, bias=None) -> dict:
    """A per-channel scale (timm `ls1.gamma`, transformers `layer_scale1.lambda1`) as `{prefix}/scale`.

    Example:
        >>> scale("s", np.ones(4))["s/scale"].shape
        (4,)
    """
    return {f"{prefix}/scale": _f32(weight)}


def tokens(prefix: str, weight, bias=None) -> dict:
    """Learned tokens or a position table, `(D,)`, `(n, D)` or `(1, n, D)`, as vit_jax's `(1, n, D)` under `prefix`.

    Example:
        >>> tokens("cls", np.zeros(8))["cls"].shape
        (1, 1, 8)
    """
    weight = _f32(weight)
    return {prefix: weight.reshape(1, -1, weight.shape[-1])}


def array(prefix: str, weight, bias=None) -> dict:
    """An array kept in the source's own shape (the text tower's token and position tables, `(n, D)`).

    Example:
        >>> array("t", np.zeros((5, 8)))["t"].shape
        (5, 8)
    """
    return {prefix: _f32(weight)}


def matrix(prefix: str, weight, bias=None) -> dict:
    """A projection stored as the matrix `P` of `x @ P` (open_clip's `proj`), (in, out): the kernel as it is.

    Example:
        >>> matrix("p", np.zeros((4, 2)))["p/kernel"].shape
        (4, 2)
    """
    return {f"{prefix}/kernel": _f32(weight)}


def scalar(prefix: str, weight, bias=None) -> dict:
    """A one-value parameter stored as `()` or `(1,)` (the logit scale and bias) as a scalar.

    Example:
        >>> scalar("logit_scale", np.array([2.3]))["logit_scale"].shape
        ()
    """
    weight = _f32(weight)
    if weight.size != 1:
        raise ValueError(f"{prefix!r} holds {weight.size} values of shape {weight.shape}; it is one number: check "
                         "that the weights file and its config describe the same model.")
    return {prefix: weight.reshape(())}


def patch_kernel(weight) -> np.ndarray:
    """A torch patch convolution (D, C, P, P) as Google's (P, P, C, D).

    Example:
        >>> patch_kernel(np.zeros((8, 3, 4, 4))).shape
        (4, 4, 3, 8)
    """
    return _f32(weight).transpose(2, 3, 1, 0)


def patch(prefix: str, weight, bias=None) -> dict:
    """A torch patch convolution as `{prefix}/kernel` (P, P, C, D) and `{prefix}/bias`.

    Example:
        >>> patch("embedding", np.zeros((8, 3, 4, 4)))["embedding/kernel"].shape
        (4, 4, 3, 8)
    """
    return _with_bias({f"{prefix}/kernel": patch_kernel(weight)}, prefix, bias)


def linear_patch(prefix: str, weight, bias=None, channels: int = 3) -> dict:
    """A torch Linear on flattened patches (D, P·P·C), (row, column, channel) order (SigLIP 2 NaFlex, timm
    `NaFlexEmbeds`), as `{prefix}/kernel` (P, P, C, D) and `{prefix}/bias`: the same kernel as the convolution's.

    Example:
        >>> linear_patch("embedding", np.zeros((8, 4 * 4 * 3)))["embedding/kernel"].shape
        (4, 4, 3, 8)
    """
    weight = _f32(weight)
    side = int(round((weight.shape[1] / channels) ** 0.5))
    if side * side * channels != weight.shape[1]:
        raise ValueError(f"{prefix!r}: a patch projection of {weight.shape[1]} inputs is not P·P·{channels} for any "
                         "patch size P.")
    return _with_bias({f"{prefix}/kernel": weight.T.reshape(side, side, channels, weight.shape[0])}, prefix, bias)


def linear_patch_back(prefix: str, params) -> tuple:
    """`{prefix}/kernel` (P, P, C, D) -> a torch Linear on flattened patches (D, P·P·C) and its bias.

    Example:
        >>> linear_patch_back("embedding", linear_patch("embedding", np.zeros((8, 48))))[0].shape
        (8, 48)
    """
    kernel = _f32(params[f"{prefix}/kernel"])
    return np.ascontiguousarray(kernel.reshape(-1, kernel.shape[-1]).T), _bias_of(params, prefix)


def linear_patch_chw(prefix: str, weight, bias=None) -> dict:
    """A Linear over patches flattened channel-major, (C, P, P) (RADIO's `embedder`, weight (D, C·P·P)), as
    `{prefix}/kernel` (P, P, C, D): the same function as a patch convolution. The images are RGB (C = 3).

    Example:
        >>> linear_patch_chw("embedding", np.zeros((8, 3 * 4 * 4)))["embedding/kernel"].shape
        (4, 4, 3, 8)
    """
    weight = _f32(weight)
    side = int(round((weight.shape[-1] / 3) ** 0.5)) if weight.ndim == 2 else 0
    if weight.ndim != 2 or 3 * side * side != weight.shape[1]:
        raise ValueError(f"A linear patch embedding must have shape (D, 3·P·P) for RGB patches of side P, got "
                         f"{weight.shape}.")
    kernel = patch_kernel(weight.reshape(weight.shape[0], 3, side, side))
    return _with_bias({f"{prefix}/kernel": kernel}, prefix, bias)


def linear_patch_chw_back(prefix: str, params) -> tuple:
    """`{prefix}/kernel` (P, P, C, D) -> the Linear weight (D, C·P·P) over channel-major patches, and its bias.

    Example:
        >>> linear_patch_chw_back("e", linear_patch_chw("e", np.arange(96.0).reshape(2, 48)))[0][1, :3].tolist()
        [48.0, 49.0, 50.0]
    """
    kernel = _f32(params[f"{prefix}/kernel"])
    weight = kernel.transpose(3, 2, 0, 1).reshape(kernel.shape[3], -1)
    return np.ascontiguousarray(weight), _bias_of(params, prefix)


def _heads(hidden: int, num_heads: int) -> int:
    if hidden % num_heads:
        raise ValueError(f"Hidden size {hidden} is not divisible by num_heads {num_heads}.")
    return hidden // num_heads


def heads_in(prefix: str, weight, bias, num_heads: int) -> dict:
    """A q, k or v projection (a torch Linear (H·d, D)) per head: kernel (D, H, d), bias (H, d).

    Example:
        >>> heads_in("q", np.zeros((4, 4)), None, 2)["q/kernel"].shape
        (4, 2, 2)
    """
    weight = _f32(weight)
    _heads(int(weight.shape[1]), num_heads)
    kernel = weight.T.reshape(weight.shape[1], num_heads, weight.shape[0] // num_heads)
    return _with_bias({f"{prefix}/kernel": kernel}, prefix, bias, (num_heads, -1))


def heads_out(prefix: str, weight, bias, num_heads: int) -> dict:
    """The attention output projection (a torch Linear (D, H·d)) per head: kernel (H, d, D), bias (D,).

    Example:
        >>> heads_out("o", np.zeros((4, 4)), np.zeros(4), 2)["o/kernel"].shape
        (2, 2, 4)
    """
    weight = _f32(weight)
    head_dim = _heads(int(weight.shape[1]), num_heads)
    return _with_bias({f"{prefix}/kernel": weight.T.reshape(num_heads, head_dim, weight.shape[0])}, prefix, bias)


def split_fused(weight, bias, parts: int):
    """Split a fused projection (`qkv`: parts=3, `kv`: parts=2) along its output axis into (weight, bias) pairs.

    Example:
        >>> len(split_fused(np.zeros((6, 2)), None, 3))
        3
    """
    weight = _f32(weight)
    if weight.shape[0] % parts:
        raise ValueError(f"A fused projection of {weight.shape[0]} outputs does not split into {parts} equal parts.")
    weights = np.split(weight, parts, axis=0)
    biases = [None] * parts if bias is None else np.split(_f32(bias), parts, axis=0)
    return list(zip(weights, biases))


def fused_heads(prefixes, weight, bias, num_heads: int) -> dict:
    """A fused projection (timm `qkv`/`kv`, torch `in_proj`), q first, as one `heads_in` per prefix.

    Example:
        >>> sorted(fused_heads(("a/key", "a/value"), np.zeros((8, 4)), np.zeros(8), 2))
        ['a/key/bias', 'a/key/kernel', 'a/value/bias', 'a/value/kernel']
    """
    out = {}
    for prefix, (part_weight, part_bias) in zip(prefixes, split_fused(weight, bias, len(prefixes))):
        out.update(heads_in(prefix, part_weight, part_bias, num_heads))
    return out


# ---- The way back: canonical arrays -> torch tensors. Each function undoes the one above it of the same name and
# returns (weight, bias), bias None where the canonical dict has none (nothing is invented in either direction).


def _bias_of(params, prefix: str, shape=None):
    bias = params.get(f"{prefix}/bias")
    if bias is None:
        return None
    bias = _f32(bias)
    return bias if shape is None else bias.reshape(shape)


def linear_back(prefix: str, params) -> tuple:
    """`{prefix}/kernel` (in, out) -> a torch Linear weight (out, in) and its bias.

    Example:
        >>> linear_back("x", linear("x", np.arange(6).reshape(3, 2)))[0].tolist()
        [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    """
    return np.ascontiguousarray(_f32(params[f"{prefix}/kernel"]).T), _bias_of(params, prefix)


def norm_back(prefix: str, params) -> tuple:
    """`{prefix}/scale` and `{prefix}/bias` -> a torch LayerNorm's weight and bias.

    Example:
        >>> norm_back("n", norm("n", np.ones(2)))[1] is None
        True
    """
    return _f32(params[f"{prefix}/scale"]), _bias_of(params, prefix)


def scale_back(prefix: str, params) -> tuple:
    """`{prefix}/scale` -> the per-channel scale (no bias).

    Example:
        >>> scale_back("s", scale("s", np.ones(4)))[0].shape
        (4,)
    """
    return _f32(params[f"{prefix}/scale"]), None


def tokens_back(prefix: str, params, rank: int = 3) -> tuple:
    """The `(1, n, D)` array under `prefix` at the source's rank: 3 as is, 2 `(n, D)`, 1 `(D,)` (one token), 4 a
    square `(1, rows, cols, D)` grid (timm NaFlexVit).

    Example:
        >>> tokens_back("cls", tokens("cls", np.zeros(8)), rank=1)[0].shape
        (8,)
    """
    value = _f32(params[prefix])
    if rank == 3:
        return value, None
    if rank == 2:
        return value.reshape(value.shape[-2:]), None
    if rank == 4:
        side = int(round(value.shape[-2] ** 0.5))
        if side * side != value.shape[-2]:
            raise ValueError(f"{prefix!r} holds {value.shape[-2]} positions, not a square grid.")
        return value.reshape(1, side, side, value.shape[-1]), None
    if value.shape[-2] != 1:
        raise ValueError(f"{prefix!r} holds {value.shape[-2]} tokens; the target stores exactly one.")
    return value.reshape(-1), None


def array_back(prefix: str, params) -> tuple:
    """The array under `prefix` as it is (no bias).

    Example:
        >>> array_back("t", array("t", np.ones((2, 3))))[0].shape
        (2, 3)
    """
    return _f32(params[prefix]), None


def matrix_back(prefix: str, params) -> tuple:
    """`{prefix}/kernel` (in, out) -> the matrix `P` of `x @ P` (no bias).

    Example:
        >>> matrix_back("p", matrix("p", np.ones((4, 2))))[0].shape
        (4, 2)
    """
    if f"{prefix}/bias" in params:
        raise ValueError(f"{prefix!r} is a bias-free projection matrix, but the model has {prefix}/bias; write it "
                         "in a format whose projection has a bias (save_pretrained(..., format='transformers')).")
    return _f32(params[f"{prefix}/kernel"]), None


def scalar_back(prefix: str, params, rank: int) -> tuple:
    """The scalar under `prefix` at the source's rank: 0 `()`, 1 `(1,)`.

    Example:
        >>> scalar_back("logit_bias", scalar("logit_bias", np.array([-2.0])), rank=1)[0].tolist()
        [-2.0]
    """
    return _f32(params[prefix]).reshape((1,) * rank), None


def patch_back(prefix: str, params) -> tuple:
    """`{prefix}/kernel` (P, P, C, D) -> a torch patch convolution (D, C, P, P) and its bias.

    Example:
        >>> patch_back("embedding", patch("embedding", np.zeros((8, 3, 4, 2))))[0].shape
        (8, 3, 4, 2)
    """
    kernel = _f32(params[f"{prefix}/kernel"]).transpose(3, 2, 0, 1)
    return np.ascontiguousarray(kernel), _bias_of(params, prefix)


def heads_in_back(prefix: str, params, num_heads: int) -> tuple:
    """A per-head q, k or v projection (kernel (D, H, d), bias (H, d)) -> a torch Linear (H·d, D) and bias (H·d,).

    Example:
        >>> heads_in_back("q", heads_in("q", np.eye(4), np.arange(4.0), 2), 2)[1].tolist()
        [0.0, 1.0, 2.0, 3.0]
    """
    kernel = _f32(params[f"{prefix}/kernel"])
    if kernel.ndim != 3 or kernel.shape[1] != num_heads:
        raise ValueError(f"{prefix}/kernel has shape {kernel.shape}; expected (D, {num_heads} heads, D/heads).")
    weight = np.ascontiguousarray(kernel.reshape(kernel.shape[0], -1).T)
    return weight, _bias_of(params, prefix, (-1,))


def heads_out_back(prefix: str, params, num_heads: int) -> tuple:
    """The per-head output projection (kernel (H, d, D)) -> a torch Linear (D, H·d) and its bias.

    Example:
        >>> heads_out_back("o", heads_out("o", np.zeros((4, 6)), None, 2), 2)[0].shape
        (4, 6)
    """
    kernel = _f32(params[f"{prefix}/kernel"])
    if kernel.ndim != 3 or kernel.shape[0] != num_heads:
        raise ValueError(f"{prefix}/kernel has shape {kernel.shape}; expected ({num_heads} heads, D/heads, D).")
    return np.ascontiguousarray(kernel.reshape(-1, kernel.shape[-1]).T), _bias_of(params, prefix)


def fused_heads_back(prefixes, params, num_heads: int) -> tuple:
    """Per-head projections (q first) -> one fused torch Linear, the parts stacked along its outputs; a bias only
    when every part has one.

    Example:
        >>> fused = fused_heads(("a/key", "a/value"), np.arange(32.0).reshape(8, 4), np.arange(8.0), 2)
        >>> fused_heads_back(("a/key", "a/value"), fused, 2)[1].tolist()
        [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    """
    parts = [heads_in_back(prefix, params, num_heads) for prefix in prefixes]
    biases = [bias for _, bias in parts]
    if any(bias is None for bias in biases) and not all(bias is None for bias in biases):
        raise ValueError(f"Of the fused projections {list(prefixes)}, some have a bias and some not; a fused "
                         "projection has one bias for all of them or none.")
    weight = np.concatenate([weight for weight, _ in parts], axis=0)
    return weight, None if biases[0] is None else np.concatenate(biases, axis=0)
