"""Resample learned position embeddings to another patch grid, keeping the prefix (class) tokens apart.

`interpolation="linear"` (the default) is vit_jax's `checkpoint.interpolate_posembed` exactly:
`scipy.ndimage.zoom(grid, (gh_new / gh_old, gw_new / gw_old, 1), order=1)`, i.e. bilinear with corner-aligned
sample points, generalised to rectangular grids with one zoom factor per axis. `interpolation="bicubic"` is
Hugging Face's `interpolate_pos_encoding`: torch bicubic (a = -0.75) with half-pixel sample points
(`align_corners=False`) and clamped borders; with `antialias=True` it is timm's `resample_abs_pos_embed`
(torch bicubic with `antialias=True`: Keys a = -0.5, the kernel widened when downsampling, renormalised borders).
`interpolation="bilinear_antialias"` is SigLIP 2 NaFlex's (transformers and timm): torch bilinear, `antialias=True`.
The bicubic matrices are `vit_keras.layers.interpolation`'s, built in NumPy float64: a model of any image size does
the same resampling inside its graph at each call, with the same maths. The linear mode is vit_jax's own call
(`scipy.ndimage.zoom`), which the in-graph linear matrix reproduces.

Example:
    >>> table = np.zeros((1, 1 + 8 * 8, 16), np.float32)
    >>> resample_position_embeddings(table, (12, 12), num_prefix_tokens=1).shape
    (1, 145, 16)
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from vit_keras.layers.interpolation import numpy_interpolation_matrix

INTERPOLATIONS = ("linear", "bicubic", "bilinear_antialias")


def check_interpolation(interpolation) -> str:
    """`interpolation` itself, if it is one this module implements; a ValueError naming the choices otherwise.

    Example:
        >>> check_interpolation("bicubic")
        'bicubic'
    """
    if not isinstance(interpolation, str) or interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"`interpolation` must be one of {INTERPOLATIONS} ('linear': vit_jax's interpolate_posembed, "
            f"'bicubic': Hugging Face's interpolate_pos_encoding, 'bilinear_antialias': SigLIP 2 NaFlex's), got "
            f"{interpolation!r}."
        )
    return interpolation


def check_source_grid(source_grid) -> tuple[int, int] | None:
    """None, or a checkpoint's stored patch grid as a (rows, cols) pair of positive ints.

    Example:
        >>> check_source_grid([4, 16])
        (4, 16)
    """
    if source_grid is None:
        return None
    if (
        isinstance(source_grid, str)
        or not isinstance(source_grid, list | tuple)
        or len(source_grid) != 2
        or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1 for v in source_grid)
    ):
        raise ValueError(
            f"`source_grid` must be the checkpoint's stored patch grid as (rows, cols) of positive ints, e.g. "
            f"(14, 14) for a 224x224 /16 checkpoint, got {source_grid!r}."
        )
    return int(source_grid[0]), int(source_grid[1])


def infer_grid(num_patches: int, grid=None) -> tuple[int, int]:
    """The (rows, cols) of a stored table of `num_patches` patch embeddings.

    A given `grid` is checked; otherwise the grid must be square.

    Example:
        >>> infer_grid(196)
        (14, 14)
    """
    if grid is not None:
        grid = (int(grid[0]), int(grid[1]))
        if grid[0] * grid[1] != num_patches:
            raise ValueError(f"A {grid[0]}x{grid[1]} grid has {grid[0] * grid[1]} patches, but the table holds "
                             f"{num_patches}.")
        return grid
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise ValueError(
            f"The checkpoint's {num_patches} position embeddings do not form a square grid and the checkpoint "
            "does not say its grid; pass `source_grid=(rows, cols)`."
        )
    return side, side


def resample_grid(grid: np.ndarray, new_grid, interpolation: str = "linear", antialias: bool = False) -> np.ndarray:
    """Resize a (rows, cols, D) embedding grid to `new_grid` = (rows', cols').

    Example:
        >>> resample_grid(np.zeros((8, 8, 4), np.float32), (12, 16)).shape
        (12, 16, 4)
    """
    check_interpolation(interpolation)
    rows, cols, _ = grid.shape
    new_rows, new_cols = int(new_grid[0]), int(new_grid[1])
    if (rows, cols) == (new_rows, new_cols):
        return grid
    if interpolation == "linear":
        zoom = (new_rows / rows, new_cols / cols, 1)
        import scipy.ndimage  # imported here: `import vit_keras` does not need scipy

        out = scipy.ndimage.zoom(grid, zoom, order=1)
        if out.shape[:2] != (new_rows, new_cols):  # zoom rounds the output size; guard against drift
            raise ValueError(f"Resampling {rows}x{cols} to {new_rows}x{new_cols} gave {out.shape[:2]}.")
        return out
    mode = interpolation if interpolation != "bicubic" else "bicubic_antialias" if antialias else "bicubic"
    row_matrix = numpy_interpolation_matrix(mode, rows, new_rows)
    col_matrix = numpy_interpolation_matrix(mode, cols, new_cols)
    out = np.einsum("ri,cj,ijd->rcd", row_matrix, col_matrix, grid.astype(np.float64))
    return out.astype(grid.dtype)


def resample_position_embeddings(
    table: np.ndarray,
    new_grid,
    num_prefix_tokens: int = 1,
    source_grid=None,
    interpolation: str = "linear",
    antialias: bool = False,
) -> np.ndarray:
    """Resample a (1, prefix + rows·cols, D) position-embedding table to `new_grid`; prefix tokens stay as is.

    `antialias=True` (with `"bicubic"`) is timm's `resample_abs_pos_embed`: torch bicubic with `antialias=True`.

    Example:
        >>> resample_position_embeddings(np.zeros((1, 65, 8), np.float32), (6, 10)).shape
        (1, 61, 8)
    """
    table = np.asarray(table)
    if table.ndim != 3 or table.shape[0] != 1:
        raise ValueError(f"Position embeddings must have shape (1, tokens, D), got {table.shape}.")
    prefix, patches = table[:, :num_prefix_tokens], table[0, num_prefix_tokens:]
    rows, cols = infer_grid(patches.shape[0], source_grid)
    grid = patches.reshape(rows, cols, -1)
    grid = resample_grid(grid, new_grid, interpolation, antialias=antialias)
    return np.concatenate([prefix, grid.reshape(1, -1, grid.shape[-1])], axis=1)
