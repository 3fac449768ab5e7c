"""Mean attention distance per layer and head (the paper's Fig. 7 right and Fig. 11).

Convention: only patch-to-patch attention counts. The class token has no position in the image,
so its row and column are dropped and each patch's attention over the other patches is
renormalised to sum to 1 before weighting the pixel distances between patch centres. The result
is averaged over query patches and over images.
"""

from __future__ import annotations

import numpy as np

from vit_keras.inspection.attention import _check_attention
from vit_keras.inspection.probe import AttentionProbe


def _pair(value, name):
    if np.isscalar(value):
        value = (value, value)
    value = tuple(float(v) for v in value)
    if len(value) != 2 or min(value) <= 0:
        raise ValueError(f"`{name}` must be a positive number or a (height, width) pair, got {value!r}.")
    return value


def patch_distances(grid_size, patch_stride) -> np.ndarray:
    """Euclidean pixel distances between the centres of all patches: `(N, N)`, N = gh·gw, row-major.

    Example:
        >>> patch_distances((1, 2), 16)
        array([[ 0., 16.],
               [16.,  0.]])
    """
    gh, gw = (int(g) for g in grid_size)
    sh, sw = _pair(patch_stride, "patch_stride")
    rows, cols = np.meshgrid(np.arange(gh) * sh, np.arange(gw) * sw, indexing="ij")
    centres = np.stack([rows.ravel(), cols.ravel()], axis=-1)
    return np.sqrt(((centres[:, None, :] - centres[None, :, :]) ** 2).sum(-1))


def mean_attention_distance(attention, grid_size, patch_stride, num_prefix_tokens: int = 1) -> np.ndarray:
    """Attention-weighted mean pixel distance between query and key patches, per head.

    Args:
        attention: `(..., batch, heads, T, T)` attention weights, e.g. `(layers, B, heads, T, T)`
            from `attention_weights`; `T = num_prefix_tokens + gh·gw`.
        grid_size: `(gh, gw)` patches.
        patch_stride: pixels between neighbouring patch centres (the patch size; for hybrids the
            patch size times the ResNet stem's stride), a number or `(sh, sw)`.
        num_prefix_tokens: 1 for a class token, 0 for `classifier="gap"`.

    Returns:
        `(..., heads)`: for `(layers, B, heads, T, T)` input, `(layers, heads)`, averaged over the
        batch and the query patches.

    Example:
        >>> uniform = np.full((1, 2, 4, 4), 0.25)  # 1 image, 2 heads, 2x2 grid, no class token
        >>> mean_attention_distance(uniform, (2, 2), 16, num_prefix_tokens=0).round(2)
        array([13.66, 13.66])
    """
    attention = _check_attention(attention)
    if attention.ndim < 4:
        raise ValueError(f"`attention` must be (..., batch, heads, T, T), got shape {attention.shape}.")
    gh, gw = (int(g) for g in grid_size)
    if attention.shape[-1] != num_prefix_tokens + gh * gw:
        raise ValueError(
            f"Attention over {attention.shape[-1]} tokens does not match {num_prefix_tokens} prefix token(s) "
            f"plus a {gh}x{gw} patch grid."
        )
    patches = attention[..., num_prefix_tokens:, num_prefix_tokens:]
    totals = patches.sum(axis=-1, keepdims=True)
    patches = patches / np.where(totals > 0, totals, 1.0)
    per_query = (patches * patch_distances((gh, gw), patch_stride)).sum(axis=-1)  # (..., B, heads, N)
    return per_query.mean(axis=-1).mean(axis=-2)


def attention_distances(model, images, batch_size: int = 8) -> np.ndarray:
    """Mean attention distance in pixels of every layer and head of `model` over `images`: `(layers, heads)`.

    Pixels are those of the image the ViT sees (its input size); see `mean_attention_distance` for
    the convention on the class token.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> images = np.random.default_rng(0).uniform(0, 255, (4, 32, 32, 3)).astype("float32")
        >>> attention_distances(model, images).shape
        (2, 3)
    """
    probe = AttentionProbe(model)
    images = probe.check_images(images)
    grid = probe.grid_for(images.shape[1:3])
    total, count = 0.0, 0
    for attention in probe.iter_batches(images, batch_size):
        batch = attention[0].shape[0]
        distances = np.stack([
            mean_attention_distance(layer, grid, probe.patch_stride, probe.num_prefix_tokens)
            for layer in attention
        ])
        total = total + distances * batch
        count += batch
    return (total / count).astype(np.float32)


def uniform_attention_distance(grid_size, patch_stride) -> float:
    """The mean attention distance of uniform attention over all patches: the mean pairwise patch distance.

    A useful reference line: heads above it attend farther than chance, heads near 0 locally.

    Example:
        >>> round(uniform_attention_distance((2, 2), 16), 2)
        13.66
    """
    return float(patch_distances(grid_size, patch_stride).mean())
