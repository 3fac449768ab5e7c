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
    >>> encoder = FlexiblePatchEncoder(hidden_size=16, grid_size=(4, 4), class_token=False,
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


def _integer_grid(grid: np.ndarray) -> np.ndarray:
    """`grid` as int64 when its values are whole numbers, else a `ValueError` naming the first image that is not
    (a float grid would otherwise be truncated: 7.5 rows to 7)."""
    if grid.dtype.kind in "iu":
        return grid.astype(np.int64)
    if grid.dtype.kind != "f":
        raise ValueError(f"NaFlex `grid` must hold integers (rows, cols per image), got dtype {grid.dtype}.")
    whole = np.isfinite(grid) & (grid == np.round(grid))
    if not whole.all():
        index = int(np.argwhere(~whole)[0][0])
        raise ValueError(f"NaFlex image {index}: `grid` {tuple(grid[index].tolist())} must be whole numbers of patch "
                         "rows and columns; pass an integer grid (vit_keras.images.naflex_patches makes one).")
    return grid.astype(np.int64)


def check_flexible_inputs(patches, grid, mask, *, features: int | None = None) -> None:
    """Refuse a NaFlex batch whose parts disagree, with a `ValueError` naming the key, the image and the sizes:
    `patches` (batch, N, `features`), `grid` (batch, 2) and `mask` (batch, N) of one batch and one N; a `grid` of
    whole numbers (an integer dtype, or floats such as 7.0) of `rows · cols` patches that match the image's `mask`
    (that many ones, first, then zeros) and fit the sequence length N; `features` is the model's P·P·C.

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
        raise ValueError(f"NaFlex `patches` of shape {patches.shape} have {width} values per patch but the model "
                         f"takes {features} (patch_size·patch_size·channels); cut the images with the model's patch "
                         "size.")
    if grid.shape != (batch, 2):
        raise ValueError(f"NaFlex `grid` must be (batch, 2) = ({batch}, 2) (rows, cols per image), got shape "
                         f"{grid.shape}.")
    grid = _integer_grid(grid)
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


def check_flexible_batch(batch, features: int) -> None:
    """`check_flexible_inputs` on a NaFlex batch given to a flexible model (`model(batch)`, `model.predict(batch)`)
    before it is traced: a dict of concrete `patches`, `grid` and `mask` (NumPy arrays, eager tensors) is checked,
    with an error naming the key, the shape found and the shape expected; anything else (a dataset, symbolic
    tensors) is left to the model.

    Example:
        >>> check_flexible_batch({"patches": np.zeros((1, 4, 12)), "grid": [[1, 2]], "mask": [[1, 1]]}, 12)
        Traceback (most recent call last):
        ValueError: NaFlex `mask` must be (batch, N) = (1, 4), like `patches` (1, 4, 12), got shape (1, 2).
    """
    if not isinstance(batch, dict):
        return
    missing = [key for key in INPUT_KEYS if key not in batch]
    if missing:
        raise ValueError(f"A NaFlex batch is a dict of {list(INPUT_KEYS)} (vit_keras.images.naflex_patches); missing "
                         f"{missing}.")
    values = _concrete_values(*(batch[key] for key in INPUT_KEYS))
    if values is not None:
        check_flexible_inputs(*values, features=features)


def _concrete_values(*tensors):
    """The NumPy values of `tensors` when they have them (an eager call on any backend), else None (a graph being
    traced: TensorFlow's `tf.function`, a JAX trace, a Keras functional build)."""
    if any(keras.backend.is_keras_tensor(t) for t in tensors):
        return None
    try:
        return [keras.ops.convert_to_numpy(t) for t in tensors]
    except (TypeError, ValueError, NotImplementedError, AttributeError):
        return None


def flexible_input_assertions(patches, grid, mask, features: int) -> list:
    """TensorFlow run-time assertions of what `check_flexible_inputs` checks, for a graph (`predict`,
    `tf.function`, a SavedModel's signature): the shapes and batch sizes of `patches`, `grid` and `mask` (a
    signature's caller can pass any), then each image's `grid` against its `mask`; each fails with an
    `InvalidArgument` naming the key, the shape found and the shape expected.

    Example:
        >>> import tensorflow as tf
        >>> try:
        ...     flexible_input_assertions(tf.zeros((1, 4, 12)), tf.constant([[2, 2]]), tf.ones((2, 4)), 12)
        ... except tf.errors.InvalidArgumentError as error:
        ...     print(error.message.split("data: ")[-1])
        b'NaFlex `mask` must be (batch, N) = [1 4], like `patches` [1 4 12], got shape [2 4].'
    """
    import tensorflow as tf

    patches_shape, grid_shape, mask_shape = tf.shape(patches), tf.shape(grid), tf.shape(mask)
    batch_and_length = patches_shape[:2]

    def check(ok, template, values):
        # "{}" in the explanation is where TensorFlow writes each shape.
        return tf.debugging.Assert(ok, [tf.strings.format(template, values)])

    width_ok = tf.equal(patches_shape[2], features)
    grid_ok = tf.reduce_all(tf.equal(grid_shape, tf.stack([patches_shape[0], 2])))
    mask_ok = tf.reduce_all(tf.equal(mask_shape, batch_and_length))
    shapes = [
        check(width_ok, f"NaFlex `patches` of shape {{}} have {{}} values per patch but the model takes {features} "
              "(patch_size·patch_size·channels); cut the images with the model's patch size.",
              [patches_shape, patches_shape[2]]),
        check(grid_ok, "NaFlex `grid` must be (batch, 2) = [{} 2] (rows, cols per image), got shape {}.",
              [patches_shape[0], grid_shape]),
        check(mask_ok, "NaFlex `mask` must be (batch, N) = {}, like `patches` {}, got shape {}.",
              [batch_and_length, patches_shape, mask_shape]),
    ]
    with tf.control_dependencies(shapes):
        grid = tf.cast(grid, tf.int32)
        count = grid[:, 0] * grid[:, 1]
        real = tf.range(batch_and_length[1])[None, :] < count[:, None]
        return shapes + [
            tf.debugging.assert_positive(grid, message="NaFlex: every image `grid` needs at least one patch row and "
                                         "column"),
            tf.debugging.assert_less_equal(count, batch_and_length[1], message="NaFlex: the rows·cols of an image "
                                           "`grid` are more patches than the sequence length N of `patches`; resize "
                                           "the image to at most N patches"),
            tf.debugging.Assert(tf.reduce_all(tf.equal(mask != 0, real)), ["NaFlex: an image `mask` does not mark "
                                "the rows·cols real patches of its `grid` first, then the padding; build the mask "
                                "from the grid"]),
        ]


def _graph_checks(patches, grid, mask, features: int):
    """Under TensorFlow, inside a graph (`predict`, `tf.function`, a SavedModel): `patches` behind the run-time
    checks of `flexible_input_assertions`, so that what is computed from them waits for the checks."""
    if keras.backend.backend() != "tensorflow":
        return patches
    import tensorflow as tf

    with tf.control_dependencies(flexible_input_assertions(patches, grid, mask, features)):
        return tf.identity(patches)


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
        features = int(self.embedding.kernel.shape[0])
        values = _concrete_values(patches, grid, mask)
        if values is not None:
            check_flexible_inputs(*values, features=features)
        else:
            patches = _graph_checks(patches, grid, mask, features)
        x = self._embed(patches)
        grid = ops.cast(grid, "int32")
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
