"""2-D rotary position embeddings (RoPE) of the 2025-26 ViTs, applied to q and k of the patch tokens only.

Three layouts (timm 1.0.31 `pos_embed_sincos.py`; transformers' DINOv3 computes the second the same way):

- `"interleaved"` (EVA-02, PE, RoPE-ViT axial, timm SBB; timm `RotaryEmbeddingCat`): integer patch positions
  (+ `grid_offset`), rescaled `t · ref / size` when `ref_grid_size` is set, bands `θ^(-4i/D_h)`, the two axes'
  angles concatenated and each value repeated twice; `rotated(x) = [-x1, x0, -x3, x2, ...]`.
- `"rotate_half"` (DINOv3; timm `RotaryEmbeddingDinoV3`): patch centres `(k + 0.5 + offset) / n` mapped to [-1, 1]
  per axis, angles `2π · c / θ^(4i/D_h)`, tiled `[a, a]`; `rotated(x) = [-x_2nd_half, x_1st_half]`. Evaluated as at
  inference upstream: no coordinate augmentation.
- `"mixed"` (RoPE-Mixed; timm `RotaryEmbeddingMixed`): learned frequencies `freqs` `(2, depth, heads, D_h/2)`,
  angle `c0 · f0 + c1 · f1` per layer and head, interleaved rotation.

`grid_indexing="ij"` orders the coordinates (row, column); `"xy"` (PE, RoPE-ViT, timm's mixed default) (column,
row). The tokens stay row-major either way.

A `RotaryEmbedding2D` layer computes the tables once per call of the model and every block takes them: for a fixed
grid they are numpy constants (XLA folds them; a TFLite file carries no Range/Tile ops), for a model of any size
they are computed in the graph from the runtime grid. The tables are `[sin | cos]` concatenated on the last axis,
`(N, 2·D_h)`, or per block `(N, heads, 2·D_h)` for `"mixed"`.

Example:
    >>> tables = rope_tables(8, "interleaved", (2, 3))
    >>> tables.shape
    (6, 16)
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from vit_keras.configs import ROPE_GRID_INDEXING, ROPE_LAYOUTS
from vit_keras.layers.checkpoint import plain

LAYOUTS, GRID_INDEXING = ROPE_LAYOUTS, ROPE_GRID_INDEXING
# The sources' θ: 1e4 for EVA-02 / PE / SBB (timm's default), 100 for DINOv3, 10 for the RoPE-Mixed initialisation.
DEFAULT_TEMPERATURE = {"interleaved": 10000.0, "rotate_half": 100.0, "mixed": 10.0}


def _check(head_dim, layout, grid_indexing):
    if layout not in LAYOUTS:
        raise ValueError(f"`rope` layout must be one of {LAYOUTS}, got {layout!r}.")
    if grid_indexing not in GRID_INDEXING:
        raise ValueError(f"`grid_indexing` must be one of {GRID_INDEXING}, got {grid_indexing!r}.")
    if int(head_dim) % 4:
        raise ValueError(f"2-D RoPE needs a head width divisible by 4 (two axes, sin/cos pairs), got {head_dim}; "
                         "choose hidden_size / num_heads accordingly.")


def _axis_positions(t, size, layout, offset, ref):
    """One axis' float32 positions of the cells `t` (float32 indices) of an axis of `size` cells (float32, a scalar
    or one per cell), in timm's order of operations (so the rounding matches)."""
    if layout == "rotate_half":
        return 2.0 * ((t + 0.5 + offset) / size) - 1.0
    t = t + offset
    if ref is not None:
        t = t / size * float(ref)
    return t


def cell_coordinates(row, col, rows, cols, layout, grid_offset=0.0, ref_grid_size=None, grid_indexing="ij"):
    """The two coordinate channels `(c0, c1)` of the cells (`row`, `col`) of grids of `rows` x `cols` cells: float32
    NumPy arrays or tensors of one shape (every token of a fixed grid, or of each image of a NaFlex batch).

    Example:
        >>> [c.tolist() for c in cell_coordinates(np.float32([0, 1]), np.float32([1, 1]), np.float32(2),
        ...                                       np.float32(2), "rotate_half")]
        [[-0.5, 0.5], [0.5, 0.5]]
    """
    ref_h, ref_w = (None, None) if ref_grid_size is None else ref_grid_size
    y = _axis_positions(row, rows, layout, grid_offset, ref_h)
    x = _axis_positions(col, cols, layout, grid_offset, ref_w)
    return (y, x) if grid_indexing == "ij" else (x, y)


def rope_coordinates(xp, grid, layout, grid_offset=0.0, ref_grid_size=None, grid_indexing="ij"):
    """The two coordinate channels `(c0, c1)`, each `(H·W,)` in row-major token order, for `grid = (H, W)`.

    `xp` is `numpy` (constants for a fixed grid) or `keras.ops` (sizes known at run time only).

    Example:
        >>> [c.tolist() for c in rope_coordinates(np, (2, 2), "interleaved", grid_indexing="xy")]
        [[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0]]
    """
    height, width = grid
    index = xp.arange(height * width)
    if xp is np:
        row, col = (index // width).astype(np.float32), (index % width).astype(np.float32)
        rows, cols = np.float32(height), np.float32(width)
    else:
        row, col = ops.cast(index // width, "float32"), ops.cast(index % width, "float32")
        rows, cols = ops.cast(height, "float32"), ops.cast(width, "float32")
    return cell_coordinates(row, col, rows, cols, layout, grid_offset, ref_grid_size, grid_indexing)


def _bands(head_dim, temperature):
    """Interleaved layout's per-axis frequencies `θ^(-4i/D_h)`, float32 `(D_h/4,)`, as timm computes them."""
    num = head_dim // 4
    return np.float32(1.0) / np.float32(temperature) ** (np.arange(num, dtype=np.float32) / np.float32(num))


def _angles(xp, coords, head_dim, layout, temperature):
    """`(..., D_h/2)` angles of coordinates `(...)`, the axes concatenated (c0's bands, then c1's)."""
    num = head_dim // 4
    if layout == "rotate_half":
        periods = np.float32(temperature) ** (2.0 * np.arange(num, dtype=np.float32) / np.float32(head_dim // 2))
        parts = [np.float32(2 * math.pi) * c[..., None] / periods for c in coords]
    else:
        bands = _bands(head_dim, temperature)
        parts = [c[..., None] * bands for c in coords]
    return xp.concatenate(parts, axis=-1)


def _mixed_angles(coords, freqs):
    """RoPE-Mixed's `(..., depth, heads, D_h/2)` angles `c0 · f0 + c1 · f1` of coordinates `(...)` and the learned
    `freqs` `(2, depth, heads, D_h/2)`."""
    c0, c1 = (c[..., None, None, None] for c in coords)
    return c0 * freqs[0] + c1 * freqs[1]


def _layout(xp, values, layout):
    """Per-frequency values `(..., D_h/2)` to the `(..., D_h)` layout the rotation expects."""
    if layout == "rotate_half":
        return xp.concatenate([values, values], axis=-1)
    return xp.repeat(values, 2, axis=-1)


def _sin_cos(xp, angles, layout):
    """`[sin | cos]` of `angles` `(..., D_h/2)`, laid out: `(..., 2·D_h)`."""
    return xp.concatenate([_layout(xp, xp.sin(angles), layout), _layout(xp, xp.cos(angles), layout)], axis=-1)


def rope_tables(head_dim, layout, grid, temperature=None, grid_offset=0.0, ref_grid_size=None, grid_indexing="ij",
                xp=np):
    """`[sin | cos]`, `(H·W, 2·head_dim)` float32, for the `"interleaved"` or `"rotate_half"` layout.

    With `xp=numpy` (the default) the grid is a pair of ints and the result a numpy constant; with `xp=keras.ops`
    the sizes may be tensors.

    Example:
        >>> t = rope_tables(4, "rotate_half", (1, 1)); t[0, 4:].tolist()  # cos of the centre (0, 0): all ones
        [1.0, 1.0, 1.0, 1.0]
    """
    _check(head_dim, layout, grid_indexing)
    if layout == "mixed":
        raise ValueError("The 'mixed' layout's tables depend on its learned frequencies: use RotaryEmbedding2D.")
    temperature = DEFAULT_TEMPERATURE[layout] if temperature is None else float(temperature)
    coords = rope_coordinates(xp, grid, layout, grid_offset, ref_grid_size, grid_indexing)
    return _sin_cos(xp, _angles(xp, coords, int(head_dim), layout, temperature), layout)


def rotate(x, layout):
    """The rotation partner of each channel: interleaved `[-x1, x0, -x3, x2, ...]` or `[-x_2nd, x_1st]`.

    Example:
        >>> rotate(keras.ops.convert_to_tensor([1.0, 2.0, 3.0, 4.0]), "interleaved").numpy().tolist()
        [-2.0, 1.0, -4.0, 3.0]
    """
    if layout == "rotate_half":
        first, second = ops.split(x, 2, axis=-1)
        return ops.concatenate([-second, first], axis=-1)
    even, odd = x[..., 0::2], x[..., 1::2]
    return ops.reshape(ops.stack([-odd, even], axis=-1), ops.shape(x))


def _signs(head_dim, layout):
    """The signs `rotate` gives each channel's partner: `[-1, 1, -1, 1, ...]` or `[-1, ..., -1, 1, ..., 1]`."""
    half = head_dim // 2
    if layout == "rotate_half":
        return np.concatenate([-np.ones(half, np.float32), np.ones(half, np.float32)])
    return np.tile(np.float32([-1.0, 1.0]), half)


def _swap(x, layout):
    """`rotate(x, layout)` without its signs, as one reshape-reverse-reshape (no slices, no concatenation)."""
    shape, half = ops.shape(x), x.shape[-1] // 2
    if layout == "rotate_half":
        return ops.reshape(ops.flip(ops.reshape(x, (*shape[:-1], 2, half)), axis=-2), shape)
    return ops.reshape(ops.flip(ops.reshape(x, (*shape[:-1], half, 2)), axis=-1), shape)


def rotation_tables(sin, cos, layout, num_prefix_tokens=0):
    """`sin`/`cos` of the patch tokens to the `(sin', cos')` that `rotate_tokens` takes: the signs of the rotation
    folded into `sin'`, and `num_prefix_tokens` rows of `cos' = 1`, `sin' = 0` put in front, so that every token,
    prefix or patch, is rotated by one elementwise expression (the prefix tokens by the identity). The tables have
    their tokens on axis -3: `(N, 1, head_dim)` (a `(N, head_dim)` table is expanded to it), `(N, heads, head_dim)`
    or a NaFlex batch's `(batch, N, 1 or heads, head_dim)`.

    For a fixed grid the tables are constants, and so are these (XLA and TensorFlow's graph optimiser fold them).

    Example:
        >>> s, c = rotation_tables(np.ones((2, 4), "float32"), np.zeros((2, 4), "float32"), "rotate_half", 1)
        >>> s[:2, 0].numpy().tolist(), c[:, 0, 0].numpy().tolist()  # the prefix row, then a patch row
        ([[0.0, 0.0, 0.0, 0.0], [-1.0, -1.0, 1.0, 1.0]], [1.0, 0.0, 0.0])
    """
    # the rotation is computed in float32, as timm does (the attention layers receive the tables in float32, see
    # transformer.Float32Rope; a caller's bfloat16 tables are taken up here)
    sin, cos = ops.cast(sin, "float32"), ops.cast(cos, "float32")
    if len(sin.shape) == 2:
        sin, cos = sin[:, None, :], cos[:, None, :]
    signs = _signs(sin.shape[-1], "rotate_half" if layout == "rotate_half" else "interleaved")
    sin = sin * ops.convert_to_tensor(signs, "float32")
    if num_prefix_tokens:
        widths = [(0, 0)] * (len(sin.shape) - 3) + [(int(num_prefix_tokens), 0), (0, 0), (0, 0)]
        sin, cos = ops.pad(sin, widths, constant_values=0.0), ops.pad(cos, widths, constant_values=1.0)
    return sin, cos


def rotate_tokens(x, sin, cos, layout):
    """`x · cos + rotate(x) · sin` for `x` `(batch, tokens, heads, head_dim)` and tables from `rotation_tables`.

    `x` may hold fewer tokens than the tables (the queries of a block that computes its first tokens only): they
    take the first rows. The rotation is computed in the tables' dtype (float32) and cast back, as timm does.

    Example:
        >>> s, c = rotation_tables(np.zeros((2, 4), "float32"), np.ones((2, 4), "float32"), "interleaved", 1)
        >>> tuple(rotate_tokens(keras.ops.ones((1, 3, 1, 4)), s, c, "interleaved").shape)
        (1, 3, 1, 4)
    """
    tokens, rows = x.shape[1], sin.shape[-3]
    if tokens is None or rows is None or tokens != rows:
        count = ops.shape(x)[1]
        sin, cos = sin[..., :count, :, :], cos[..., :count, :, :]
    dtype = x.dtype
    x = ops.cast(x, sin.dtype)
    return ops.cast(x * cos + _swap(x, "rotate_half" if layout == "rotate_half" else "interleaved") * sin, dtype)


def apply_rope(x, sin, cos, layout, num_prefix_tokens=0):
    """Rotate the patch tokens of `x` `(batch, tokens, heads, head_dim)`; the first `num_prefix_tokens` pass as is.

    `sin`/`cos` are `(N, head_dim)` (shared by the heads) or `(N, heads, head_dim)` (`"mixed"`), for the N patch
    tokens of the whole grid, or `(batch, N, 1 or heads, head_dim)`: each image's own (a NaFlex batch). `x` may hold
    fewer tokens than `num_prefix_tokens + N` (the queries of a block that computes its first tokens only): its patch
    tokens are the grid's first ones, and take the first rows. The rotation is computed in the tables' dtype
    (float32) and cast back, as timm does. It is `rotation_tables`, then `rotate_tokens`; an attention layer that
    rotates q and k prepares the tables once for both.

    Example:
        >>> sin, cos = np.zeros((2, 4), "float32"), np.ones((2, 4), "float32")
        >>> tuple(apply_rope(keras.ops.ones((1, 3, 1, 4)), sin, cos, "interleaved", 1).shape)
        (1, 3, 1, 4)
    """
    sin, cos = rotation_tables(sin, cos, layout, num_prefix_tokens)
    return rotate_tokens(x, sin, cos, layout)


def split_tables(tables):
    """`[sin | cos]` tables to `(sin, cos)`.

    Example:
        >>> [t.shape for t in split_tables(np.zeros((3, 8)))]
        [(3, 4), (3, 4)]
    """
    return ops.split(tables, 2, axis=-1) if not isinstance(tables, np.ndarray) else np.split(tables, 2, axis=-1)


@keras.saving.register_keras_serializable(package="vit_keras")
class RotaryEmbedding2D(keras.layers.Layer):
    """The RoPE tables of a patch grid, computed once per model call for every block.

    Call it on the patch grid `(batch, H, W, C)` (the unflattened patches of a model of any size: static H and W
    give numpy constants, unknown ones in-graph tables) or, with `grid_size=(H, W)` set, on any tensor of the model
    (the tables are then constants). It returns `[sin | cos]` `(H·W, 2·head_dim)`, or for `"mixed"` a list of
    `depth` tables `(H·W, heads, 2·head_dim)`, one per block.

    Called on a NaFlex `mask` `(batch, N)` with `grid=` `(batch, 2)` (each image's rows and columns,
    `vit_keras.layers.flexible`), it gives each image the tables of its own grid at its tokens' cells, with the same
    maths: `(batch, N, 1, 2·head_dim)`, or for `"mixed"` `depth` tables `(batch, N, heads, 2·head_dim)`. The padding
    tokens get finite values of cells past the grid (they are masked out of the attention).

    `"mixed"` holds the learned frequencies `freqs` `(2, depth, heads, head_dim/2)` (timm `rope.freqs`), initialised
    as timm does (random rotation per layer and head of the θ-bands).

    Example:
        >>> rope = RotaryEmbedding2D(8, "interleaved", grid_size=(2, 3))
        >>> tuple(rope(keras.ops.zeros((1, 7, 16))).shape)
        (6, 16)
    """

    def __init__(self, head_dim: int, layout: str = "interleaved", grid_size=None, temperature=None,
                 grid_offset: float = 0.0, ref_grid_size=None, grid_indexing: str = "ij", depth=None,
                 num_heads=None, **kwargs):
        super().__init__(**kwargs)
        _check(head_dim, layout, grid_indexing)
        self.head_dim = int(head_dim)
        self.layout = layout
        self.grid_size = None if grid_size is None else (int(grid_size[0]), int(grid_size[1]))
        self.temperature = DEFAULT_TEMPERATURE[layout] if temperature is None else float(temperature)
        self.grid_offset = float(grid_offset)
        self.ref_grid_size = None if ref_grid_size is None else (int(ref_grid_size[0]), int(ref_grid_size[1]))
        self.grid_indexing = grid_indexing
        if layout == "mixed" and (depth is None or num_heads is None):
            raise ValueError("The 'mixed' RoPE layout learns frequencies per block and head: pass `depth` and "
                             "`num_heads`.")
        if layout == "mixed" and self.ref_grid_size is not None:
            raise ValueError("The 'mixed' RoPE layout uses integer patch positions: `ref_grid_size` must be None.")
        self.depth = None if depth is None else int(depth)
        self.num_heads = None if num_heads is None else int(num_heads)

    def build(self, x_shape, grid_shape=None):
        if self.layout == "mixed":
            self.freqs = self.add_weight(name="freqs", shape=(2, self.depth, self.num_heads, self.head_dim // 2),
                                         initializer=self._initial_freqs, dtype="float32")

    def _initial_freqs(self, shape, dtype=None):
        # timm `init_random_2d_freqs`: the θ-bands rotated by a random angle per layer and head.
        # A tensor, not an array: `ndarray * torch.Tensor` is refused on the PyTorch backend.
        magnitude = ops.convert_to_tensor(
            1.0 / self.temperature ** (np.arange(0, self.head_dim, 4, dtype=np.float32) / self.head_dim), "float32")
        angles = keras.random.uniform((self.depth, self.num_heads, 1), 0.0, 2 * math.pi)
        fx = ops.concatenate([magnitude * ops.cos(angles), magnitude * ops.cos(angles + math.pi / 2)], axis=-1)
        fy = ops.concatenate([magnitude * ops.sin(angles), magnitude * ops.sin(angles + math.pi / 2)], axis=-1)
        return ops.cast(ops.stack([fx, fy]), dtype or "float32")

    def _grid(self, x):
        if self.grid_size is not None:
            return self.grid_size
        if len(x.shape) != 4:
            raise ValueError(f"RotaryEmbedding2D {self.name!r} needs the patch grid (batch, H, W, C) or "
                             f"`grid_size=(H, W)`; got a tensor of shape {tuple(x.shape)}.")
        height, width = x.shape[1], x.shape[2]
        if height is None or width is None:
            shape = ops.shape(x)
            return shape[1], shape[2]
        return int(height), int(width)

    def call(self, x, grid=None):
        if grid is not None:
            return self._tables(self._image_coordinates(x, grid), ops, per_image=True)
        grid = self._grid(x)
        xp = np if all(isinstance(size, int) for size in grid) else ops
        layout = "interleaved" if self.layout == "mixed" else self.layout
        coords = rope_coordinates(xp, grid, layout, self.grid_offset, self.ref_grid_size, self.grid_indexing)
        return self._tables(coords, xp, per_image=False)

    def _image_coordinates(self, mask, grid):
        """Each token's coordinates in its own image's grid: `(batch, N)` each."""
        grid = ops.cast(grid, "int32")
        index = ops.arange(ops.shape(mask)[1], dtype="int32")[None, :]
        cols = ops.maximum(grid[:, 1:], 1)
        row, col = ops.cast(index // cols, "float32"), ops.cast(index % cols, "float32")
        rows, cols = ops.cast(ops.maximum(grid[:, :1], 1), "float32"), ops.cast(cols, "float32")
        layout = "interleaved" if self.layout == "mixed" else self.layout
        return cell_coordinates(row, col, rows, cols, layout, self.grid_offset, self.ref_grid_size,
                                self.grid_indexing)

    def _tables(self, coords, xp, per_image):
        """The tables of coordinates `(c0, c1)` (`(N,)` each, or `(batch, N)` with `per_image`)."""
        if self.layout != "mixed":
            tables = _sin_cos(xp, _angles(xp, coords, self.head_dim, self.layout, self.temperature), self.layout)
            tables = ops.convert_to_tensor(tables, "float32")
            return tables[:, :, None, :] if per_image else tables
        coords = [ops.convert_to_tensor(c, "float32") for c in coords]
        # (..., depth, heads, D_h/2)
        tables = _sin_cos(ops, _mixed_angles(coords, ops.cast(self.freqs, "float32")), "interleaved")
        return [tables[..., i, :, :] for i in range(self.depth)]

    def _num_positions(self, input_shape):
        if self.grid_size is not None:
            return self.grid_size[0] * self.grid_size[1]
        if input_shape[1] is None or input_shape[2] is None:
            return None
        return input_shape[1] * input_shape[2]

    def compute_output_shape(self, x_shape, grid_shape=None):
        if grid_shape is not None:
            batch, n = x_shape[0], x_shape[1]
            if self.layout != "mixed":
                return (batch, n, 1, 2 * self.head_dim)
            return [(batch, n, self.num_heads, 2 * self.head_dim) for _ in range(self.depth)]
        n = self._num_positions(x_shape)
        if self.layout != "mixed":
            return (n, 2 * self.head_dim)
        return [(n, self.num_heads, 2 * self.head_dim) for _ in range(self.depth)]

    def checkpoint_variables(self):
        return {"freqs": plain(self.freqs)} if self.layout == "mixed" else {}

    def get_config(self):
        return {
            **super().get_config(),
            "head_dim": self.head_dim,
            "layout": self.layout,
            "grid_size": self.grid_size,
            "temperature": self.temperature,
            "grid_offset": self.grid_offset,
            "ref_grid_size": self.ref_grid_size,
            "grid_indexing": self.grid_indexing,
            "depth": self.depth,
            "num_heads": self.num_heads,
        }
