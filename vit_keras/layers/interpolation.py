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
- `"bilinear_antialias"`: SigLIP 2 NaFlex (transformers `Siglip2VisionEmbeddings`, timm `naflexvit_*_siglip`), torch
  bilinear with `antialias=True` and half-pixel sample points (the triangle kernel stretched when downsampling,
  renormalised at the borders).
- `"bilinear_crop"`: RADIO's cropped position embeddings (transformers `RadioPatchEmbeddings`): torch bilinear
  (`align_corners=False`, no antialias: half-pixel sample points clamped at 0, two taps) to a square of the longer
  side of the new grid, then its first rows and columns. Per axis that is the bilinear weights of the square's
  first cells.

The matrices are written once, over a small set of array operations, and built either as graph ops (float32) or
in NumPy float64 (`numpy_interpolation_matrix`, the load-time path), so the two paths share their maths.

`keras.ops.image.resize` is not used: it has no corner-aligned linear mode, and its bicubic is Keys a = −0.5 (TF,
JAX), so only the antialiased mode could match, and only on some backends.

Example:
    >>> grid = keras.ops.ones((4, 4, 8))
    >>> tuple(resample_grid(grid, (6, 5), "bicubic").shape)
    (6, 5, 8)
"""

from __future__ import annotations

import keras
import numpy as np
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
            f"'bicubic': transformers, 'bicubic_antialias': timm, 'bilinear_antialias': SigLIP 2 NaFlex, "
            f"'bilinear_crop': RADIO), got {mode!r}."
        )
    return mode


class _GraphOps:
    """The array operations the matrices are written with, as graph ops in float32 (sizes may be symbolic)."""

    @staticmethod
    def size(n):
        return ops.cast(n, "float32")

    @staticmethod
    def arange(n):
        return ops.cast(ops.arange(n), "float32")

    @staticmethod
    def offsets(start, stop):
        return ops.arange(start, stop, dtype="int32")

    @staticmethod
    def to_int(x):
        return ops.cast(x, "int32")

    @staticmethod
    def one_hot(index, depth):
        return ops.one_hot(index, depth, dtype="float32")

    @staticmethod
    def stack(arrays):
        return ops.stack(arrays, axis=-1)

    floor, abs, clip, where, maximum, sum = ops.floor, ops.abs, ops.clip, ops.where, ops.maximum, ops.sum


class _NumPyOps:
    """The same operations in NumPy float64, for the load-time resampling (`vit_keras.weights.resample`)."""

    @staticmethod
    def size(n):
        return np.float64(n)

    @staticmethod
    def arange(n):
        return np.arange(n, dtype=np.float64)

    @staticmethod
    def offsets(start, stop):
        return np.arange(start, stop)

    @staticmethod
    def to_int(x):
        return x.astype(np.int64)

    @staticmethod
    def one_hot(index, depth):
        return np.eye(depth, dtype=np.float64)[index]

    @staticmethod
    def stack(arrays):
        return np.stack(arrays, axis=-1)

    floor, abs, clip, where, maximum, sum = np.floor, np.abs, np.clip, np.where, np.maximum, np.sum


def _linear_weights(in_size: int, index, out_size, xp):
    # scipy.ndimage.zoom(order=1, grid_mode=False): output i samples input i·(in − 1)/(out − 1) (0 if out == 1).
    step = xp.where(out_size > 1.0, (in_size - 1.0) / xp.maximum(out_size - 1.0, 1.0), 1.0)
    source = index * step
    taps = xp.arange(in_size)
    return xp.maximum(1.0 - xp.abs(source[..., None] - taps), 0.0)


def _bicubic_weights(in_size: int, index, out_size, xp):
    # torch upsample_bicubic2d, align_corners=False: unclamped half-pixel source, taps clamped to the border.
    scale = in_size / out_size
    source = (index + 0.5) * scale - 0.5
    base = xp.floor(source)
    t = source - base
    a = TORCH_CUBIC_A
    weights = xp.stack([cubic_far(t + 1, a), cubic_near(t, a), cubic_near(1 - t, a), cubic_far(2 - t, a)])
    taps = xp.clip(xp.to_int(base)[..., None] + xp.offsets(-1, 3), 0, in_size - 1)
    return xp.sum(xp.one_hot(taps, in_size) * weights[..., None], axis=-2)


def _antialias_cubic(x, xp):
    x = xp.abs(x)
    a = ANTIALIAS_CUBIC_A
    return xp.where(x < 1.0, cubic_near(x, a), xp.where(x < 2.0, cubic_far(x, a), 0.0))


def _triangle(x, xp):
    return xp.maximum(1.0 - xp.abs(x), 0.0)


def _antialias_weights(kernel):
    # torch _upsample_bicubic2d_aa / _upsample_bilinear2d_aa: the kernel is evaluated at every input tap (it is
    # zero beyond its support), stretched by the scale when downsampling, and each row renormalised.
    def weights(in_size: int, index, out_size, xp):
        scale = in_size / out_size
        inv_scale = xp.where(scale >= 1.0, 1.0 / scale, 1.0)
        center = scale * (index + 0.5)
        taps = xp.arange(in_size)
        values = kernel((taps - center[..., None] + 0.5) * inv_scale[..., None], xp)
        total = xp.sum(values, axis=-1, keepdims=True)
        return values / xp.where(total != 0.0, total, 1.0)

    return weights


def _bilinear_weights(in_size: int, index, out_size, xp):
    # torch upsample_bilinear2d, align_corners=False, no antialias: the half-pixel source clamped at 0, taps
    # floor(source) and the next one (clamped to the border), weighted by the distance.
    scale = in_size / out_size
    source = xp.maximum((index + 0.5) * scale - 0.5, 0.0)
    base = xp.floor(source)
    t = (source - base)[..., None]
    low = xp.clip(xp.to_int(base), 0, in_size - 1)
    high = xp.clip(low + 1, 0, in_size - 1)
    return xp.one_hot(low, in_size) * (1.0 - t) + xp.one_hot(high, in_size) * t


# mode -> weights(in_size, index, out_size, xp): the (..., in_size) weights of output cell `index` of `out_size`
# (both float arrays of one shape: a whole axis for a matrix, or one cell per token of a NaFlex batch).
_WEIGHTS = {"linear": _linear_weights, "bicubic": _bicubic_weights,
            "bicubic_antialias": _antialias_weights(_antialias_cubic),
            "bilinear_antialias": _antialias_weights(_triangle),
            # The first cells of the bilinear resize to the square: `out_size` is the square's side (see _scale_size).
            "bilinear_crop": _bilinear_weights}


def _scale_size(mode: str, out_size, square_size):
    """The size an axis is resampled to: its own, or for `"bilinear_crop"` the square's side (default its own)."""
    if square_size is not None and mode != "bilinear_crop":
        raise ValueError(f"`square_size` applies to the 'bilinear_crop' mode only, not {mode!r}.")
    return out_size if square_size is None else square_size


def interpolation_weights(mode: str, in_size: int, index, out_size):
    """The weights over `in_size` stored cells of output cell `index` of an axis resampled to `out_size` cells with
    `mode`, as float32 tensors of shape `(*index.shape, in_size)`; `index` and `out_size` are tensors of one shape,
    so that every token of a batch of images of different grids gets its own (`vit_keras.layers.flexible`).

    Example:
        >>> tuple(interpolation_weights("bilinear_antialias", 4, keras.ops.zeros((2, 3)),
        ...                             keras.ops.full((2, 3), 5.0)).shape)
        (2, 3, 4)
    """
    mode = check_grid_interpolation(mode)
    index, out_size = ops.cast(index, "float32"), ops.cast(out_size, "float32")
    return _WEIGHTS[mode](in_size, index, out_size, _GraphOps)


def interpolation_matrix(mode: str, in_size: int, out_size, square_size=None):
    """The `(out, in)` matrix that resamples one axis of `in_size` cells to `out_size` with `mode`, as a float32
    tensor (`out_size` may be symbolic). `"bilinear_crop"` resizes to `square_size` (the longer side of the new
    grid; default `out_size`) and keeps the first `out_size` cells.

    Example:
        >>> tuple(interpolation_matrix("bicubic", 4, 6).shape)
        (6, 4)
        >>> tuple(interpolation_matrix("bilinear_crop", 8, 4, square_size=6).shape)
        (4, 8)
    """
    mode = check_grid_interpolation(mode)
    size = _scale_size(mode, out_size, square_size)
    return _WEIGHTS[mode](in_size, _GraphOps.arange(out_size), _GraphOps.size(size), _GraphOps)


def numpy_interpolation_matrix(mode: str, in_size: int, out_size: int, square_size=None) -> np.ndarray:
    """`interpolation_matrix`'s maths in NumPy float64: the load-time path (`vit_keras.weights.resample`).

    Example:
        >>> numpy_interpolation_matrix("linear", 2, 3)[1]
        array([0.5, 0.5])
        >>> numpy_interpolation_matrix("bilinear_crop", 2, 1, square_size=2)
        array([[1., 0.]])
    """
    mode = check_grid_interpolation(mode)
    size = _scale_size(mode, int(out_size), None if square_size is None else int(square_size))
    return _WEIGHTS[mode](in_size, _NumPyOps.arange(int(out_size)), _NumPyOps.size(size), _NumPyOps)


def square_side(new_grid):
    """The side of the square `"bilinear_crop"` resizes to: the longer side of `new_grid` (static or symbolic).

    Example:
        >>> square_side((4, 6))
        6
    """
    rows, cols = new_grid
    if isinstance(rows, int) and isinstance(cols, int):
        return max(rows, cols)
    return ops.maximum(ops.cast(rows, "int32"), ops.cast(cols, "int32"))


def numpy_resample_grid(grid: np.ndarray, new_grid, mode: str) -> np.ndarray:
    """`resample_grid` in NumPy float64 (any mode; the result in `grid`'s dtype).

    Example:
        >>> numpy_resample_grid(np.zeros((8, 8, 4), np.float32), (4, 6), "bilinear_crop").shape
        (4, 6, 4)
    """
    rows, cols = int(grid.shape[0]), int(grid.shape[1])
    new_rows, new_cols = int(new_grid[0]), int(new_grid[1])
    square = max(new_rows, new_cols) if mode == "bilinear_crop" else None
    row_matrix = numpy_interpolation_matrix(mode, rows, new_rows, square)
    col_matrix = numpy_interpolation_matrix(mode, cols, new_cols, square)
    out = np.einsum("ri,cj,ijd->rcd", row_matrix, col_matrix, np.asarray(grid, np.float64))
    return out.astype(grid.dtype)


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
    unchanged = isinstance(new_rows, int) and isinstance(new_cols, int) and (new_rows, new_cols) == (rows, cols)
    if unchanged and (mode != "bilinear_crop" or rows == cols):  # a rectangle is first resized to a square
        return grid
    dtype = grid.dtype
    square = square_side(new_grid) if mode == "bilinear_crop" else None
    row_matrix = interpolation_matrix(mode, rows, new_rows, square)
    col_matrix = interpolation_matrix(mode, cols, new_cols, square)
    grid = ops.cast(grid, "float32")
    out = ops.einsum("ri,ijd->rjd", row_matrix, grid)
    out = ops.einsum("cj,rjd->rcd", col_matrix, out)
    return ops.cast(out, keras.backend.standardize_dtype(dtype))
