"""The pieces of masked patch prediction (paper §4.6, App. B.1.2): corrupt patches, mark them, compute targets.

BERT's scheme on patch embeddings: a share `corruption_rate` (50%) of each image's patches is corrupted; of those,
`mask_rate` (80%) get a learned [mask] embedding, `random_rate` (10%) the embedding of a random other patch and the
rest (10%) stay as they are. The model then predicts, for each corrupted patch, a target computed from the
original pixels: its 3-bit mean colour (512 classes), a coarse grid of 3-bit colours (16 predictions of 512
classes for the paper's 4x4) or all its pixel values (L2).

The corruption acts on the flattened pixel patches that the patch projection (a per-patch affine map) embeds:
giving a patch another patch's pixels gives it exactly that patch's embedding, and a masked patch's pixels are
zeroed, so its embedding carries nothing of the original; `MaskEmbedding` then adds a learned vector to it. The
masked token is `W·0 + b + m = b + m` (plus its position embedding): a free learned [mask] embedding, as in BERT,
with no trace of the hidden content in any precision.

Example:
    >>> import keras
    >>> corruption = PatchCorruption(seed=0)
    >>> corrupted, roles = corruption(keras.ops.ones((2, 16, 12)))
    >>> tuple(corrupted.shape), tuple(roles.shape)
    ((2, 16, 12), (2, 16))
"""

from __future__ import annotations

import keras
from keras import ops

TARGETS = ("mean_colour", "downsized_colour", "pixels")
COLOUR_BITS = 3
COLOUR_LEVELS = 2**COLOUR_BITS
COLOUR_CLASSES = COLOUR_LEVELS**3
# Roles of a patch in the corrupted input.
CLEAN, MASKED, REPLACED, KEPT = 0, 1, 2, 3
# A count that lies this close to a whole number is that number (guards float32 products such as 0.8 * 10).
_WHOLE_TOLERANCE = 1e-4
EVAL_SEED_OFFSET = 1_000_003


def _rate(name, value, upper=1.0):
    value = float(value)
    if not 0.0 <= value <= upper:
        raise ValueError(f"`{name}` must lie in [0, {upper}], got {value}.")
    return value


def _share_count(share, noise):
    """floor(share + noise), noise ~ U[0, 1): the share's floor or ceiling with the share as its expectation;
    a whole-number share comes out exactly."""
    rounded = ops.round(share)
    share = ops.where(ops.abs(share - rounded) < _WHOLE_TOLERANCE, rounded, share)
    return ops.floor(share + noise)


@keras.saving.register_keras_serializable(package="vit_keras")
class PatchCorruption(keras.layers.Layer):
    """Corrupt a share of each image's flattened patches; return them with each patch's role.

    Input `(batch, N, P·P·C)` patches; output the corrupted patches (same shape) and `roles` `(batch, N)` int32:
    0 clean, 1 masked (pixels zeroed, see `MaskEmbedding`), 2 replaced by a random other patch of the batch, 3
    selected but kept. Per image, a seeded random permutation orders the patches: the first `S` are selected, the
    first `M` of those masked, the next `R` replaced. `S = corruption_rate·N`, `M = mask_rate·S` and
    `M + R = (mask_rate + random_rate)·S` exactly whenever those are whole numbers; otherwise each is the floor or
    the ceiling of its share, drawn so that its expectation is the share (with 16 patches: 8 selected, 6 or 7 of
    them masked, 6.4 on average). Static shapes throughout (XLA compiles it). In training the draws come from a
    `keras.random.SeedGenerator` whose state is saved with the weights, and each `tf.distribute` replica draws its
    own; otherwise from fixed seeds, so that evaluating corrupts each batch alike every time.

    Example:
        >>> corrupted, roles = PatchCorruption(corruption_rate=0.5, seed=1)(keras.ops.ones((4, 20, 12)))
        >>> [int(keras.ops.sum(keras.ops.cast(roles[0] > 0, "int32")))]
        [10]
    """

    def __init__(self, corruption_rate: float = 0.5, mask_rate: float = 0.8, random_rate: float = 0.1,
                 seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.corruption_rate = _rate("corruption_rate", corruption_rate)
        self.mask_rate = _rate("mask_rate", mask_rate)
        self.random_rate = _rate("random_rate", random_rate)
        if self.mask_rate + self.random_rate > 1.0 + 1e-9:
            raise ValueError(
                f"mask_rate {self.mask_rate} + random_rate {self.random_rate} exceed 1: they are shares of the "
                "corrupted patches (the rest are kept), e.g. 0.8 and 0.1."
            )
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed, name="corruption_seed")

    def _uniform(self, shape, seed):
        """U[0, 1) noise of `shape`; under `tf.distribute` each replica takes its own slice of one draw (the
        generator's state is shared by the replicas, so equal draws would corrupt alike)."""
        replicas, replica = 1, 0
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            context = tf.distribute.get_replica_context()
            if context is not None and context.num_replicas_in_sync > 1:
                replicas, replica = context.num_replicas_in_sync, context.replica_id_in_sync_group
        if replicas == 1:
            return keras.random.uniform(shape, seed=seed)
        return ops.take(keras.random.uniform((replicas, *shape), seed=seed), replica, axis=0)

    def call(self, patches, training=None):
        batch = ops.shape(patches)[0]
        num_patches = patches.shape[1]
        if training:
            seeds = (self.seed_generator,) * 3
        else:
            # Evaluation corrupts a batch the same way every time (comparable validation losses and figures) and
            # leaves the training stream alone, so that a resumed run draws what the uninterrupted one drew.
            base = 0 if self.seed is None else int(self.seed)
            seeds = (base + EVAL_SEED_OFFSET, base + EVAL_SEED_OFFSET + 1, base + EVAL_SEED_OFFSET + 2)
        order_noise = self._uniform((batch, num_patches), seeds[0])
        count_noise = self._uniform((batch, 2), seeds[1])
        other_noise = self._uniform((batch, num_patches), seeds[2])
        # rank[b, i]: the position of patch i in image b's random permutation.
        rank = ops.cast(ops.argsort(ops.argsort(order_noise, axis=-1), axis=-1), "float32")
        selected = _share_count(ops.full((batch, 1), self.corruption_rate * num_patches), count_noise[:, :1])
        masked = _share_count(self.mask_rate * selected, count_noise[:, 1:])
        replaced = _share_count((self.mask_rate + self.random_rate) * selected, count_noise[:, 1:])
        roles = ops.where(rank < masked, MASKED,
                          ops.where(rank < replaced, REPLACED, ops.where(rank < selected, KEPT, CLEAN)))
        roles = ops.cast(roles, "int32")

        # A random *other* patch of the batch: a non-zero offset modulo the number of patches in the batch.
        total = batch * num_patches
        flat = ops.reshape(patches, (total, patches.shape[-1]))
        offsets = 1 + ops.floor(ops.reshape(other_noise, (-1,)) * ops.cast(total - 1, "float32"))
        sources = ops.mod(ops.arange(total, dtype="int32") + ops.cast(offsets, "int32"), total)
        others = ops.reshape(ops.take(flat, sources, axis=0), ops.shape(patches))

        role = roles[..., None]
        corrupted = ops.where(role == MASKED, ops.zeros_like(patches), ops.where(role == REPLACED, others, patches))
        return corrupted, roles

    def compute_output_shape(self, input_shape):
        return tuple(input_shape), tuple(input_shape[:2])

    # Keras leaves seed-generator states out of weight files: store it, so that a resumed run corrupts the batches
    # it has still to see exactly as the uninterrupted run would have.
    def save_own_variables(self, store):
        store["0"] = ops.convert_to_numpy(self.seed_generator.state.value)

    def load_own_variables(self, store):
        if "0" in store.keys():
            self.seed_generator.state.assign(ops.convert_to_tensor(store["0"], self.seed_generator.state.dtype))

    def get_config(self):
        return {**super().get_config(), "corruption_rate": self.corruption_rate, "mask_rate": self.mask_rate,
                "random_rate": self.random_rate, "seed": self.seed}


@keras.saving.register_keras_serializable(package="vit_keras")
class MaskEmbedding(keras.layers.Layer):
    """Add the learned [mask] vector to the tokens of masked patches (role 1 of `PatchCorruption`).

    Inputs `[tokens (batch, prefix + N, D), roles (batch, N)]`; prefix tokens (the class token) are left alone.

    Example:
        >>> layer = MaskEmbedding()
        >>> tuple(layer([keras.ops.zeros((2, 5, 8)), keras.ops.ones((2, 4), "int32")]).shape)
        (2, 5, 8)
    """

    def build(self, input_shape):
        tokens_shape, _ = input_shape
        self.mask_embedding = self.add_weight(
            name="mask_embedding", shape=(tokens_shape[-1],), initializer=keras.initializers.RandomNormal(stddev=0.02)
        )

    def call(self, inputs):
        tokens, roles = inputs
        prefix = tokens.shape[1] - roles.shape[1]
        masked = ops.cast(ops.equal(roles, MASKED), tokens.dtype)
        if prefix:
            masked = ops.pad(masked, ((0, 0), (prefix, 0)))
        return tokens + masked[..., None] * ops.cast(self.mask_embedding, tokens.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0])


def colour_classes(values):
    """3-bit colour classes of `values` (..., 3) in [0, 255]: each channel's 3 most significant bits (8 equal bins
    of [0, 256)), combined as `r·64 + g·8 + b` (512 classes).

    Example:
        >>> int(colour_classes(keras.ops.convert_to_tensor([[255.0, 32.0, 31.9]]))[0])
        456
    """
    levels = ops.clip(ops.floor(values * (COLOUR_LEVELS / 256.0) + 1e-5), 0, COLOUR_LEVELS - 1)
    levels = ops.cast(levels, "int32")
    return levels[..., 0] * COLOUR_LEVELS**2 + levels[..., 1] * COLOUR_LEVELS + levels[..., 2]


def class_colours(classes):
    """The colour in [0, 255] a 3-bit class stands for: the centre of each channel's bin (inverse of
    `colour_classes`).

    Example:
        >>> keras.ops.convert_to_numpy(class_colours(keras.ops.convert_to_tensor([456]))).tolist()
        [[240.0, 48.0, 16.0]]
    """
    classes = ops.cast(classes, "int32")
    channels = [classes // COLOUR_LEVELS**2, (classes // COLOUR_LEVELS) % COLOUR_LEVELS, classes % COLOUR_LEVELS]
    return (ops.cast(ops.stack(channels, axis=-1), "float32") + 0.5) * (256.0 / COLOUR_LEVELS)


def _patch_grid(pixel_patches, patch_size, channels):
    return ops.reshape(pixel_patches, (ops.shape(pixel_patches)[0], pixel_patches.shape[1], patch_size, patch_size,
                                       channels))


def mean_colour_target(pixel_patches, patch_size: int, channels: int = 3):
    """The paper's target: the 3-bit class of each patch's mean colour. `pixel_patches` `(batch, N, P·P·C)` in
    [0, 255] as `Patches` flattens them; returns int32 `(batch, N)`.

    Example:
        >>> patch = keras.ops.convert_to_tensor([[[0.0, 0, 0, 64, 64, 64, 128, 0, 0, 255, 255, 255]]])
        >>> int(mean_colour_target(patch, patch_size=2)[0, 0])
        210
    """
    grid = _patch_grid(pixel_patches, patch_size, channels)
    return colour_classes(ops.mean(grid, axis=(2, 3)))


def downsized_colour_target(pixel_patches, patch_size: int, grid: int = 4, channels: int = 3):
    """Each patch average-pooled to `grid`×`grid` cells, each cell's mean colour as a 3-bit class: int32
    `(batch, N, grid·grid)`, cells row by row (the paper's 4×4 downsized patch, 16 predictions of 512 classes).

    Example:
        >>> tuple(downsized_colour_target(keras.ops.zeros((1, 2, 8 * 8 * 3)), patch_size=8, grid=4).shape)
        (1, 2, 16)
    """
    cell = patch_size // grid
    patches = _patch_grid(pixel_patches, patch_size, channels)
    batch, num = ops.shape(patches)[0], patches.shape[1]
    cells = ops.reshape(patches, (batch, num, grid, cell, grid, cell, channels))
    means = ops.mean(cells, axis=(3, 5))
    return ops.reshape(colour_classes(means), (batch, num, grid * grid))


def pixel_target(pixel_patches):
    """The L2 target: every pixel value of the patch, scaled from [0, 255] to the model's [-1, 1].

    Example:
        >>> keras.ops.convert_to_numpy(pixel_target(keras.ops.convert_to_tensor([[[0.0, 255.0]]]))).tolist()
        [[[-1.0, 1.0]]]
    """
    return pixel_patches / 127.5 - 1.0


def target_shape(target: str, patch_size: int, target_grid: int = 4, channels: int = 3) -> tuple[int, ...]:
    """The per-patch prediction shape of a target: (512,), (grid², 512) or (P·P·C,).

    Example:
        >>> target_shape("downsized_colour", 16)
        (16, 512)
    """
    check_target(target, patch_size, target_grid)
    if target == "mean_colour":
        return (COLOUR_CLASSES,)
    if target == "downsized_colour":
        return (target_grid * target_grid, COLOUR_CLASSES)
    return (patch_size * patch_size * channels,)


def check_target(target: str, patch_size: int, target_grid: int = 4) -> None:
    """Raise a `ValueError` naming the fix when `target` is unknown or the grid does not divide the patch.

    Example:
        >>> check_target("mean_colour", 16)
    """
    if target not in TARGETS:
        raise ValueError(f"Unknown masked-patch target {target!r}; use one of {TARGETS}.")
    if target == "downsized_colour" and (target_grid < 1 or patch_size % target_grid):
        raise ValueError(
            f"target='downsized_colour' pools each {patch_size}x{patch_size} patch to a {target_grid}x{target_grid} "
            f"grid, which needs target_grid to divide the patch size; use a target_grid among "
            f"{[g for g in range(1, patch_size + 1) if patch_size % g == 0]} or another patch size."
        )


@keras.saving.register_keras_serializable(package="vit_keras")
class MaskedPatchTargets(keras.layers.Layer):
    """What the model must predict for each patch, from the original images, in float32.

    Takes the images as the encoder does and maps them back to [0, 255] with `scale`/`offset` (the encoder's
    `Rescaling`; identity for [0, 255] input), then cuts the patches as `Patches` does. Returns int32 classes
    `(batch, N)` / `(batch, N, grid²)` or float32 pixels `(batch, N, P·P·C)` in [-1, 1].

    Example:
        >>> tuple(MaskedPatchTargets("mean_colour", patch_size=2)(keras.ops.zeros((1, 8, 8, 3))).shape)
        (1, 16)
    """

    def __init__(self, target: str = "mean_colour", patch_size: int = 16, target_grid: int = 4,
                 input_scale: float = 1.0, input_offset: float = 0.0, **kwargs):
        kwargs["dtype"] = "float32"  # 3-bit bins need the exact pixel values, not bfloat16's 8 bits
        super().__init__(**kwargs)
        check_target(target, patch_size, target_grid)
        self.target = target
        self.patch_size = int(patch_size)
        self.target_grid = int(target_grid)
        self.input_scale = float(input_scale)
        self.input_offset = float(input_offset)

    def call(self, images):
        images = ops.cast(images, "float32")
        pixels = (images - self.input_offset) / self.input_scale
        p = self.patch_size
        height, width, channels = images.shape[1:]
        gh, gw = height // p, width // p
        x = ops.reshape(pixels, (-1, gh, p, gw, p, channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        patches = ops.reshape(x, (-1, gh * gw, p * p * channels))
        if self.target == "mean_colour":
            return mean_colour_target(patches, p, channels)
        if self.target == "downsized_colour":
            return downsized_colour_target(patches, p, self.target_grid, channels)
        return pixel_target(patches)

    def get_config(self):
        return {**super().get_config(), "target": self.target, "patch_size": self.patch_size,
                "target_grid": self.target_grid, "input_scale": self.input_scale, "input_offset": self.input_offset}
