"""Resampling a grid of position embeddings inside the model graph, to the patch grid of the images at call time.

Each mode is the one a checkpoint's own library uses, written as a `(out, in)` weight matrix per axis so that the
graph reproduces the load-time NumPy resampling of `vit_keras.weights.resample` (and with it the libraries) to
float32 rounding, on every Keras backend and under XLA:

- `"linear"`: vit_jax's `interpolate_posembed`, `scipy.ndimage.zoom(order=1)`: linear with corner-aligned sample
  points (a hat kernel at `i·(in − 1)/(out − 1)`).
- `"bicubic"`: transformers' `interpolate_pos_encoding`, torch bicubic (Keys a = −0.75) with half-pixel sample
  points and clamped borders.
- `"bicubic_antialias"`: timm's `resample_abs_pos_embed`, torch bicubic with `antialias=True` (Keys a = −0.5, the
  kernel stretched when downsampling, weights renormalised at the borders).

`keras.ops.image.resize` is not used: it has no corner-aligned linear mode, and its bicubic is Keys a = −0.5 (TF,
JAX), so only the antialiased mode could match, and only on some backends.

Example:
    >>> grid = keras.ops.ones((4, 4, 8))
    >>> tuple(resample_grid(grid, (6, 5), "bicubic").shape)
    (6, 5, 8)
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras.configs import POS_INTERPOLATIONS as GRID_INTERPOLATIONS

TORCH_CUBIC_A = -0.75  # torch's bicubic (and so transformers')
ANTIALIAS_CUBIC_A = -0.5  # torch's bicubic when antialias=True (and so timm's)


def cubic_near(x, a):
    """Keys' cubic convolution kernel for 0 <= x <= 1 (NumPy arrays and tensors alike).

    Example:
        >>> cubic_near(0.0, -0.75)
        1.0
    """
    return ((a + 2) * x - (a + 3)) * x * x + 1


def cubic_far(x, a):
    """Keys' cubic convolution kernel for 1 <= x <= 2 (NumPy arrays and tensors alike).

    Example:
        >>> cubic_far(2.0, -0.75)
        0.0
    """
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a


def check_grid_interpolation(mode) -> str:
    """`mode` itself, if it is one of `GRID_INTERPOLATIONS`; a ValueError naming the choices otherwise.

    Example:
        >>> check_grid_interpolation("linear")
        'linear'
    """
    if mode not in GRID_INTERPOLATIONS:
        raise ValueError(
            f"The position-embedding interpolation must be one of {GRID_INTERPOLATIONS} ('linear': vit_jax, "
            f"'bicubic': transformers, 'bicubic_antialias': timm), got {mode!r}."
        )
    return mode


def _linear_matrix(in_size: int, out_size):
    # scipy.ndimage.zoom(order=1, grid_mode=False): output i samples input i·(in − 1)/(out − 1) (0 if out == 1).
    out_float = ops.cast(out_size, "float32")
    step = ops.where(out_float > 1.0, (in_size - 1.0) / ops.maximum(out_float - 1.0, 1.0), 1.0)
    source = ops.cast(ops.arange(out_size), "float32") * step
    taps = ops.cast(ops.arange(in_size), "float32")
    return ops.relu(1.0 - ops.abs(source[:, None] - taps[None, :]))


def _bicubic_matrix(in_size: int, out_size):
    # torch upsample_bicubic2d, align_corners=False: unclamped half-pixel source, taps clamped to the border.
    scale = in_size / ops.cast(out_size, "float32")
    source = (ops.cast(ops.arange(out_size), "float32") + 0.5) * scale - 0.5
    base = ops.floor(source)
    t = source - base
    a = TORCH_CUBIC_A
    weights = ops.stack([cubic_far(t + 1, a), cubic_near(t, a), cubic_near(1 - t, a), cubic_far(2 - t, a)], axis=-1)
    index = ops.cast(base, "int32")[:, None] + ops.arange(-1, 3, dtype="int32")[None, :]
    index = ops.clip(index, 0, in_size - 1)
    return ops.sum(ops.one_hot(index, in_size, dtype="float32") * weights[..., None], axis=1)


def _antialias_cubic(x):
    x = ops.abs(x)
    a = ANTIALIAS_CUBIC_A
    return ops.where(x < 1.0, cubic_near(x, a), ops.where(x < 2.0, cubic_far(x, a), 0.0))


def _bicubic_antialias_matrix(in_size: int, out_size):
    # torch _upsample_bicubic2d_aa: the kernel is evaluated at every input tap (it is zero beyond its support),
    # stretched by the scale when downsampling, and each row renormalised.
    scale = in_size / ops.cast(out_size, "float32")
    inv_scale = ops.where(scale >= 1.0, 1.0 / scale, 1.0)
    center = scale * (ops.cast(ops.arange(out_size), "float32") + 0.5)
    taps = ops.cast(ops.arange(in_size), "float32")
    weights = _antialias_cubic((taps[None, :] - center[:, None] + 0.5) * inv_scale)
    total = ops.sum(weights, axis=1, keepdims=True)
    return weights / ops.where(total != 0.0, total, 1.0)


_MATRICES = {"linear": _linear_matrix, "bicubic": _bicubic_matrix, "bicubic_antialias": _bicubic_antialias_matrix}


def resample_grid(grid, new_grid, mode: str = "linear"):
    """Resize a `(rows, cols, D)` tensor of embeddings to `new_grid = (rows', cols')`, inside the graph.

    `rows` and `cols` must be static; `new_grid` may hold tensors (a symbolic image size). A static `new_grid` equal
    to the grid returns `grid` itself, so a model called at its stored grid has no resampling op.

    Example:
        >>> tuple(resample_grid(keras.ops.zeros((2, 2, 4)), (3, 3)).shape)
        (3, 3, 4)
    """
    mode = check_grid_interpolation(mode)
    rows, cols = int(grid.shape[0]), int(grid.shape[1])
    new_rows, new_cols = new_grid
    if isinstance(new_rows, int) and isinstance(new_cols, int) and (new_rows, new_cols) == (rows, cols):
        return grid
    dtype = grid.dtype
    matrix = _MATRICES[mode]
    row_matrix = matrix(rows, new_rows)
    col_matrix = matrix(cols, new_cols)
    grid = ops.cast(grid, "float32")
    out = ops.einsum("ri,ijd->rjd", row_matrix, grid)
    out = ops.einsum("cj,rjd->rcd", col_matrix, out)
    return ops.cast(out, keras.backend.standardize_dtype(dtype))
