"""Native-aspect-ratio ("NaFlex") inputs: a batch of images of different sizes, each cut into its own grid of
patches, padded to one sequence length, with a validity mask (SigLIP 2 NaFlex; transformers `Siglip2VisionModel`,
timm `NaFlexVit`).

A flexible model takes a dict: `patches` `(batch, N, P·P·C)` (each patch flattened in (row, column, channel) order,
the patches of an image in row-major grid order, then padding), `grid` `(batch, 2)` int32 (each image's patch rows
and columns) and `mask` `(batch, N)` (1 for the image's `rows · cols` real patches, which come first; 0 for padding).

`FlexiblePatchEncoder` embeds the patches with the same kernel as the fixed-size model's patch projection and adds
the stored position grid resized to each image's own grid (`pos_interpolation`, e.g. SigLIP 2's antialiased bilinear);
`TokenMask` gives the per-token validity the Transformer blocks (padding masked out as keys), the MAP head and the
average / max pooling read, so that a real token's output depends neither on the padding nor on the other images.

Example:
    >>> encoder = FlexiblePatchEncoder(hidden_size=16, grid_size=(4, 4), classifier="gap",
    ...                                pos_interpolation="bilinear_antialias")
    >>> patches = np.zeros((2, 6, 12), "float32")
    >>> grid, mask = np.array([[2, 3], [1, 2]], "int32"), np.array([[1] * 6, [1, 1, 0, 0, 0, 0]], "int32")
    >>> tuple(encoder([patches, grid, mask]).shape)
    (2, 6, 16)
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from vit_keras.layers.encoder import PatchEncoder
from vit_keras.layers.interpolation import interpolation_weights, square_side

INPUT_KEYS = ("patches", "grid", "mask")


def check_flexible_inputs(patches, grid, mask, *, features: int | None = None) -> None:
    """Refuse a NaFlex batch whose parts disagree, with a `ValueError` naming the image and the sizes: a `grid` of
    `rows · cols` patches must match the image's `mask` (that many ones, first, then zeros) and fit the sequence
    length N; `features` is the model's P·P·C.

    Example:
        >>> check_flexible_inputs(np.zeros((1, 4, 12)), np.array([[2, 3]]), np.ones((1, 4)))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: NaFlex image 0: `grid` (2, 3) is 6 patches, more than the sequence length N=4 of `patches` ...
    """
    patches, grid, mask = np.asarray(patches), np.asarray(grid), np.asarray(mask)
    if patches.ndim != 3:
        raise ValueError(f"NaFlex `patches` must be (batch, N, patch_size·patch_size·channels), got shape "
                         f"{patches.shape}.")
    batch, length, width = patches.shape
    if features is not None and width != features:
        raise ValueError(f"NaFlex `patches` have {width} values per patch but the model takes {features} "
                         "(patch_size·patch_size·channels); cut the images with the model's patch size.")
    if grid.shape != (batch, 2):
        raise ValueError(f"NaFlex `grid` must be (batch, 2) = ({batch}, 2) (rows, cols per image), got shape "
                         f"{grid.shape}.")
    if mask.shape != (batch, length):
        raise ValueError(f"NaFlex `mask` must be (batch, N) = ({batch}, {length}), like `patches` {patches.shape}, "
                         f"got shape {mask.shape}.")
    for index, ((rows, cols), valid) in enumerate(zip(grid.tolist(), mask)):
        count = int(rows) * int(cols)
        if rows < 1 or cols < 1:
            raise ValueError(f"NaFlex image {index}: `grid` ({rows}, {cols}) must have at least one patch row and "
                             "column.")
        if count > length:
            raise ValueError(f"NaFlex image {index}: `grid` ({rows}, {cols}) is {count} patches, more than the "
                             f"sequence length N={length} of `patches` {patches.shape}; resize the image to at most "
                             f"{length} patches (vit_keras.preprocessing.naflex_size) or pad the batch to a longer N.")
        expected = np.arange(length) < count
        if not np.array_equal(valid != 0, expected):
            raise ValueError(f"NaFlex image {index}: `grid` ({rows}, {cols}) says {count} real patches, but its "
                             f"`mask` marks {int(np.count_nonzero(valid))} (the real patches must come first, "
                             "then the padding); build the mask from the grid.")


def _concrete_values(*tensors):
    """The NumPy values of `tensors` when they have them (an eager call on any backend), else None (a graph being
    traced: TensorFlow's `tf.function`, a JAX trace, a Keras functional build)."""
    if any(keras.backend.is_keras_tensor(t) for t in tensors):
        return None
    try:
        return [keras.ops.convert_to_numpy(t) for t in tensors]
    except (TypeError, ValueError, NotImplementedError, AttributeError):
        return None


def _graph_checks(x, grid, mask):
    """Under TensorFlow, inside a graph (`predict`, `tf.function`, a SavedModel): `x` behind run-time checks of what
    `check_flexible_inputs` refuses eagerly, failing with an `InvalidArgument` that says which."""
    if keras.backend.backend() != "tensorflow":
        return x
    import tensorflow as tf

    length = tf.shape(mask)[1]
    count = grid[:, 0] * grid[:, 1]
    real = tf.cast(tf.range(length)[None, :] < count[:, None], tf.int32)
    checks = [
        tf.debugging.assert_positive(grid, message="NaFlex: every image `grid` needs at least one patch row and "
                                     "column"),
        tf.debugging.assert_less_equal(count, length, message="NaFlex: the rows·cols of an image `grid` are more "
                                       "patches than the sequence length N of `patches`; resize the image to at most "
                                       "N patches"),
        tf.debugging.assert_equal(tf.cast(mask != 0, tf.int32), real, message="NaFlex: an image `mask` does not mark "
                                  "the rows·cols real patches of its `grid` first, then the padding; build the mask "
                                  "from the grid"),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(x)


def _sincos_2d_tokens(rows, cols, hidden_size: int, temperature: float = 10_000.0):
    """`sincos_2d_position_embeddings` at each token's (row, col): `(batch, N, D)`."""
    quarter = hidden_size // 4
    omega = ops.convert_to_tensor(1.0 / temperature ** (np.arange(quarter, dtype=np.float64) / quarter), "float32")
    rows, cols = ops.cast(rows, "float32")[..., None] * omega, ops.cast(cols, "float32")[..., None] * omega
    return ops.concatenate([ops.sin(cols), ops.cos(cols), ops.sin(rows), ops.cos(rows)], axis=-1)


@keras.saving.register_keras_serializable(package="vit_keras")
class FlexiblePatchEncoder(PatchEncoder):
    """`PatchEncoder` for NaFlex batches: called on `[patches, grid, mask]` (see the module), it embeds each patch
    with the patch projection (`embedding`, the same variables and checkpoint names), adds the stored `grid_size`
    position table resized to each image's own grid with `pos_interpolation`, zeroes the padding and prepends the
    prefix tokens as `PatchEncoder` does. Output: `(batch, prefix + N, D)`.

    The resizing is written per token (the weights of a token's row over the stored rows times those of its column
    over the stored columns), which equals resizing the whole grid image by image (`F.interpolate` in transformers
    and timm) without a loop over the batch.
    """

    def build(self, input_shape):
        patches_shape = input_shape[0] if isinstance(input_shape, list | tuple) and isinstance(
            input_shape[0], list | tuple) else input_shape
        super().build((patches_shape[0], None, patches_shape[-1]))

    def _position_embeddings(self, rows, cols, grid):
        """`(batch, N, D)` embeddings of the tokens at (`rows`, `cols`) of images of `grid` (None for "none")."""
        if self.position_embedding == "none":
            return None
        if self.position_embedding == "sincos_2d":
            return _sincos_2d_tokens(rows, cols, self.hidden_size)
        table = self.patch_position_embeddings()
        stored_rows, stored_cols = self.grid_size
        out_rows, out_cols = grid[:, :1], grid[:, 1:]
        if self.pos_interpolation == "bilinear_crop":
            # RADIO: the table resized to a square of the image grid's longer side, then its first rows and columns.
            out_rows = out_cols = square_side((out_rows, out_cols))
        out_rows = ops.broadcast_to(out_rows, ops.shape(rows))
        out_cols = ops.broadcast_to(out_cols, ops.shape(cols))
        row_weights = interpolation_weights(self.pos_interpolation, stored_rows, rows, out_rows)
        col_weights = interpolation_weights(self.pos_interpolation, stored_cols, cols, out_cols)
        weights = row_weights[..., :, None] * col_weights[..., None, :]
        weights = ops.reshape(weights, (*ops.shape(weights)[:2], stored_rows * stored_cols))
        table = ops.reshape(ops.cast(table, "float32"), (stored_rows * stored_cols, self.hidden_size))
        return ops.matmul(weights, table)

    def call(self, inputs, training=None):
        patches, grid, mask = inputs
        values = _concrete_values(patches, grid, mask)
        if values is not None:
            check_flexible_inputs(*values, features=int(self.embedding.kernel.shape[0]))
        x = self._embed(patches)
        grid = ops.cast(grid, "int32")
        if values is None:
            x = _graph_checks(x, grid, mask)
        length = ops.shape(x)[1]
        index = ops.arange(length, dtype="int32")[None, :]
        cols = ops.maximum(grid[:, 1:], 1)
        rows, cols = index // cols, index % cols
        table = self._position_embeddings(rows, cols, grid)
        if table is not None:
            x = x + ops.cast(table, x.dtype)
        # Padding carries nothing (not even a NaN fed as padding) into the masked attention.
        x = ops.where(ops.cast(mask, "bool")[..., None], x, ops.zeros_like(x))
        return self.dropout(self.join_prefix(x), training=training)

    def compute_output_shape(self, input_shape):
        patches_shape = input_shape[0]
        length = None if patches_shape[1] is None else self.num_prefix_tokens + patches_shape[1]
        return (patches_shape[0], length, self.hidden_size)


@keras.saving.register_keras_serializable(package="vit_keras")
class TokenMask(keras.layers.Layer):
    """The validity of every token, `(batch, prefix + N)` bool: the prefix tokens (class, registers) are always
    real, the patches are as the NaFlex `mask` says.

    Example:
        >>> TokenMask(1)(np.array([[1, 0]], "int32")).numpy().tolist()
        [[True, True, False]]
    """

    def __init__(self, num_prefix_tokens: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.num_prefix_tokens = int(num_prefix_tokens)

    def call(self, mask):
        mask = ops.cast(mask, "bool")
        if not self.num_prefix_tokens:
            return mask
        prefix = ops.ones((ops.shape(mask)[0], self.num_prefix_tokens), "bool")
        return ops.concatenate([prefix, mask], axis=1)

    def compute_output_shape(self, input_shape):
        length = None if input_shape[1] is None else input_shape[1] + self.num_prefix_tokens
        return (input_shape[0], length)

    def compute_output_spec(self, mask):
        return keras.KerasTensor(self.compute_output_shape(mask.shape), dtype="bool")

    def get_config(self):
        return {**super().get_config(), "num_prefix_tokens": self.num_prefix_tokens}


def flexible_inputs(features: int) -> dict:
    """The three `keras.Input`s of a flexible model, `patches` of `features` = P·P·C values each.

    Example:
        >>> sorted(flexible_inputs(192))
        ['grid', 'mask', 'patches']
    """
    return {"patches": keras.Input((None, features), name="patches"),
            "grid": keras.Input((2,), dtype="int32", name="grid"),
            "mask": keras.Input((None,), dtype="int32", name="mask")}
