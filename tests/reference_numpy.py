"""An independent float64 NumPy Vision Transformer, written from the paper's equations (REFERENCE.md §1, §4).

It reads parameters from a flat dict with vit_jax's raw checkpoint names, so the tests can feed it
either a model's own weights (through `params_from_model`) or a checkpoint file.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erf


def linear_align_corners_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) interpolation matrix of corner-aligned linear resampling along one axis."""
    matrix = np.zeros((n_out, n_in))
    for dst in range(n_out):
        src = dst * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        low = min(int(math.floor(src)), n_in - 1)
        high = min(low + 1, n_in - 1)
        frac = src - low
        matrix[dst, low] += 1 - frac
        matrix[dst, high] += frac
    return matrix


def interpolate_posembed(posemb: np.ndarray, new_grid, num_prefix_tokens: int = 1, old_grid=None) -> np.ndarray:
    """vit_jax `interpolate_posembed` semantics, generalised to (rows, cols) grids; float64."""
    prefix, grid = posemb[:, :num_prefix_tokens], posemb[0, num_prefix_tokens:]
    if old_grid is None:
        side = math.isqrt(grid.shape[0])
        old_grid = (side, side)
    grid = grid.reshape(old_grid[0], old_grid[1], -1).astype(np.float64)
    rows = linear_align_corners_matrix(old_grid[0], new_grid[0])
    cols = linear_align_corners_matrix(old_grid[1], new_grid[1])
    grid = np.einsum("ri,cj,ijd->rcd", rows, cols, grid)
    return np.concatenate([prefix.astype(np.float64), grid.reshape(1, -1, grid.shape[-1])], axis=1)


def layer_norm(x, scale, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def softmax(x, axis=-1):
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def _same_padding(size, kernel, stride):
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, (total // 2, total - total // 2)


def conv2d_same(x, w, stride):
    """TF-style SAME convolution, NHWC input and HWIO kernel (extra padding bottom/right)."""
    kh, kw = w.shape[:2]
    out_h, pad_h = _same_padding(x.shape[1], kh, stride)
    out_w, pad_w = _same_padding(x.shape[2], kw, stride)
    xp = np.pad(x, ((0, 0), pad_h, pad_w, (0, 0)))
    y = np.zeros((x.shape[0], out_h, out_w, w.shape[3]))
    for i in range(kh):
        for j in range(kw):
            window = xp[:, i : i + stride * out_h : stride, j : j + stride * out_w : stride, :]
            y += window @ w[i, j]
    return y


def max_pool_same(x, window, stride):
    out_h, pad_h = _same_padding(x.shape[1], window, stride)
    out_w, pad_w = _same_padding(x.shape[2], window, stride)
    xp = np.pad(x, ((0, 0), pad_h, pad_w, (0, 0)), constant_values=-np.inf)
    y = np.full((x.shape[0], out_h, out_w, x.shape[3]), -np.inf)
    for i in range(window):
        for j in range(window):
            y = np.maximum(y, xp[:, i : i + stride * out_h : stride, j : j + stride * out_w : stride, :])
    return y


def group_norm(x, scale, bias, groups=32, eps=1e-6):
    n, h, w, c = x.shape
    g = x.reshape(n, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 2, 4), keepdims=True)
    g = (g - mean) / np.sqrt(var + eps)
    return g.reshape(n, h, w, c) * scale.reshape(-1) + bias.reshape(-1)


def std_conv(x, w, stride):
    w = (w - w.mean(axis=(0, 1, 2))) / (w.std(axis=(0, 1, 2)) + 1e-5)
    return conv2d_same(x, w, stride)


def _conv_norm(x, p, prefix, name, stride):
    x = std_conv(x, p[f"{prefix}conv{name}/kernel"], stride)
    return group_norm(x, p[f"{prefix}gn{name}/scale"], p[f"{prefix}gn{name}/bias"])


def resnet_stem(x, p, num_layers):
    x = std_conv(x, p["conv_root/kernel"], 2)
    x = np.maximum(group_norm(x, p["gn_root/scale"], p["gn_root/bias"]), 0.0)
    x = max_pool_same(x, 3, 2)
    for s, block_size in enumerate(num_layers):
        for u in range(block_size):
            stride = 2 if s > 0 and u == 0 else 1
            pre = f"block{s + 1}/unit{u + 1}/"
            residual = x
            if pre + "conv_proj/kernel" in p:
                residual = group_norm(
                    std_conv(x, p[pre + "conv_proj/kernel"], stride), p[pre + "gn_proj/scale"], p[pre + "gn_proj/bias"]
                )
            y = np.maximum(_conv_norm(x, p, pre, "1", 1), 0.0)
            y = np.maximum(_conv_norm(y, p, pre, "2", stride), 0.0)
            y = _conv_norm(y, p, pre, "3", 1)
            x = np.maximum(residual + y, 0.0)
    return x


def attention(y, p, prefix):
    def proj(name):
        return np.einsum("btd,dhk->bthk", y, p[f"{prefix}{name}/kernel"]) + p[f"{prefix}{name}/bias"]

    q, k, v = proj("query"), proj("key"), proj("value")
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    weights = softmax(logits)
    out = np.einsum("bhqk,bkhd->bqhd", weights, v)
    return np.einsum("bqhd,hdo->bqo", out, p[f"{prefix}out/kernel"]) + p[f"{prefix}out/bias"]


def vit_forward(
    images,
    p,
    *,
    patch_size,
    num_layers=None,
    classifier="token",
    layer_norm_epsilon=1e-6,
    gelu_approximate=True,
    resnet_layers=None,
    include_preprocessing=False,
    source_grid=None,
    posemb_before_class_token=False,
):
    """Logits of the paper's ViT for NHWC `images`, from raw-name parameters `p` (float64 throughout).

    Position embeddings stored for another grid (`source_grid`, or square when not given) are resampled
    with vit_jax's `interpolate_posembed` semantics.

    `posemb_before_class_token=True` is big_vision's `models/vit.py` order: tokens = patches + pos_embedding
    (a (1, N, D) table for the N grid tokens only), then the class token is concatenated with no position
    embedding. False is vit_jax's: concatenate the class token, then add a (1, N+1, D) table.
    """
    p = {key: np.asarray(value, np.float64) for key, value in p.items()}
    if num_layers is None:
        num_layers = sum(key.endswith("LayerNorm_0/scale") for key in p)
    x = np.asarray(images, np.float64)
    if include_preprocessing:
        x = x / 127.5 - 1.0
    if resnet_layers is not None:
        x = resnet_stem(x, p, resnet_layers)
    n, h, w, c = x.shape
    gh, gw = h // patch_size, w // patch_size
    patches = x.reshape(n, gh, patch_size, gw, patch_size, c).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(n, gh * gw, patch_size * patch_size * c)
    kernel = p["embedding/kernel"]
    x = patches @ kernel.reshape(-1, kernel.shape[-1]) + p["embedding/bias"]
    pos = p["Transformer/posembed_input/pos_embedding"]

    def add_posemb(tokens, prefix):
        table = pos
        if table.shape[1] != tokens.shape[1] or (source_grid is not None and tuple(source_grid) != (gh, gw)):
            table = interpolate_posembed(table, (gh, gw), prefix, source_grid)
        return tokens + table

    def add_class_token(tokens):
        if classifier != "token":
            return tokens
        return np.concatenate([np.broadcast_to(p["cls"], (n, 1, tokens.shape[-1])), tokens], axis=1)

    if posemb_before_class_token:
        x = add_class_token(add_posemb(x, 0))
    else:
        x = add_posemb(add_class_token(x), 1 if classifier == "token" else 0)
    for i in range(num_layers):
        pre = f"Transformer/encoderblock_{i}/"
        y = layer_norm(x, p[pre + "LayerNorm_0/scale"], p[pre + "LayerNorm_0/bias"], layer_norm_epsilon)
        x = x + attention(y, p, pre + "MultiHeadDotProductAttention_1/")
        y = layer_norm(x, p[pre + "LayerNorm_2/scale"], p[pre + "LayerNorm_2/bias"], layer_norm_epsilon)
        y = gelu(y @ p[pre + "MlpBlock_3/Dense_0/kernel"] + p[pre + "MlpBlock_3/Dense_0/bias"], gelu_approximate)
        x = x + y @ p[pre + "MlpBlock_3/Dense_1/kernel"] + p[pre + "MlpBlock_3/Dense_1/bias"]
    x = layer_norm(x, p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"], layer_norm_epsilon)
    x = x[:, 0] if classifier == "token" else x.mean(axis=1)
    if "pre_logits/kernel" in p:
        x = np.tanh(x @ p["pre_logits/kernel"] + p["pre_logits/bias"])
    return x @ p["head/kernel"] + p["head/bias"]


def params_from_model(model):
    """Read a built vit_keras model's weights into the raw vit_jax naming, as float64 arrays."""

    def get(variable):
        return np.asarray(variable.numpy(), np.float64)

    p = {}
    encoder = model.get_layer("patch_encoder")
    p["embedding/kernel"] = get(encoder.embedding.kernel)
    p["embedding/bias"] = get(encoder.embedding.bias)
    if encoder.class_token:
        p["cls"] = get(encoder.cls)
    p["Transformer/posembed_input/pos_embedding"] = get(encoder.pos_embedding)
    i = 0
    while True:
        try:
            block = model.get_layer(f"Transformer_encoderblock_{i}")
        except ValueError:
            break
        pre = f"Transformer/encoderblock_{i}/"
        p[pre + "LayerNorm_0/scale"], p[pre + "LayerNorm_0/bias"] = get(block.norm_1.gamma), get(block.norm_1.beta)
        p[pre + "LayerNorm_2/scale"], p[pre + "LayerNorm_2/bias"] = get(block.norm_2.gamma), get(block.norm_2.beta)
        attn = block.attention
        for name, dense in (
            ("query", attn._query_dense),
            ("key", attn._key_dense),
            ("value", attn._value_dense),
            ("out", attn._output_dense),
        ):
            p[f"{pre}MultiHeadDotProductAttention_1/{name}/kernel"] = get(dense.kernel)
            p[f"{pre}MultiHeadDotProductAttention_1/{name}/bias"] = get(dense.bias)
        for j, dense in enumerate((block.mlp.dense_0, block.mlp.dense_1)):
            p[f"{pre}MlpBlock_3/Dense_{j}/kernel"] = get(dense.kernel)
            p[f"{pre}MlpBlock_3/Dense_{j}/bias"] = get(dense.bias)
        i += 1
    norm = model.get_layer("encoder_norm")
    p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"] = get(norm.gamma), get(norm.beta)
    for name in ("pre_logits", "head"):
        try:
            dense = model.get_layer(name)
        except ValueError:
            continue
        p[f"{name}/kernel"], p[f"{name}/bias"] = get(dense.kernel), get(dense.bias)
    try:
        stem = model.get_layer("resnet")
    except ValueError:
        return p
    p["conv_root/kernel"] = get(stem.conv_root.kernel)
    p["gn_root/scale"], p["gn_root/bias"] = get(stem.gn_root.gamma), get(stem.gn_root.beta)
    for unit in stem.units:
        block, unit_name = unit.name.split("_")
        pre = f"{block}/{unit_name}/"
        for conv in ("conv1", "conv2", "conv3", "conv_proj"):
            if hasattr(unit, conv):
                p[pre + conv + "/kernel"] = get(getattr(unit, conv).kernel)
        for gn in ("gn1", "gn2", "gn3", "gn_proj"):
            if hasattr(unit, gn):
                p[pre + gn + "/scale"] = get(getattr(unit, gn).gamma)
                p[pre + gn + "/bias"] = get(getattr(unit, gn).beta)
    return p


def randomize_weights(model, seed=0, scale=0.1):
    """Give every weight a random value (norm scales near 1), so zero-initialised heads and class tokens count."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        shape = tuple(variable.shape)
        path = variable.path
        if path.endswith("gamma"):
            value = 1.0 + scale * rng.standard_normal(shape)
        else:
            value = scale * rng.standard_normal(shape)
        variable.assign(value.astype(np.float32))
