"""The training and evaluation input of a flexible (NaFlex) model: `vit_keras.training.data`'s pipelines with each
image kept at its aspect ratio, fit to a patch budget (`vit_keras.naflex_data.naflex_map`), padded and masked,
optionally batched by patch count (`naflex_buckets`). `vit_keras.training.train` uses them when its config sets
`max_patches` (at most `vit_keras.preprocessing.MAX_NUM_PATCHES`). Images are RGB in [0, 255]; uint16 (16-bit)
images are scaled from 0..65535 to it.
"""

from __future__ import annotations

from vit_keras.configs import check_positive_int
from vit_keras.naflex_data import naflex_buckets, naflex_example, naflex_pixels_graph
from vit_keras.preprocessing import check_max_num_patches, naflex_size_graph
from vit_keras.training import data

NAFLEX_CROPS = ("inception", "resize", "shift")  # data.CROPS, each applied at the image's own size


def _rgb(image):
    """float32 RGB in [0, 255]: a 16-bit image scaled as the NaFlex helpers do, grey repeated, alpha dropped."""
    return data._to_rgb(naflex_pixels_graph(image))


def _batched(ds, batch_size: int, max_num_patches: int, buckets, drop_remainder: bool):
    if buckets:
        return ds.apply(naflex_buckets(buckets, batch_size, drop_remainder=drop_remainder))
    return ds.batch(batch_size, drop_remainder=drop_remainder)


def naflex_train_pipeline(dataset, *, patch_size: int, max_num_patches: int, batch_size: int, num_classes: int,
                          crop: str = "inception", flip: bool = True, buckets=None, shuffle_buffer: int = 10_000,
                          cache: bool = True, seed: int | None = None, skip_batches: int = 0, input_context=None):
    """`vit_keras.training.data.train_pipeline` for a flexible model: the endless, shuffled, augmented stream of
    `({"patches", "grid", "mask"}, one-hot label)` batches, each image at its own aspect ratio fit to
    `max_num_patches` patches (`naflex_example`), the batch padded to N and masked, or with `buckets` (sequence
    lengths, see `naflex_buckets`) to its bucket's length.

    The augmentations work at each image's own size: `crop="inception"` cuts vit_jax's random box (5%-100% of the
    area, aspect 3/4..4/3) and fits the box to the patch budget, "resize" fits the whole image, "shift" fits it and
    then moves it by up to `data.SHIFT_PIXELS` pixels; `flip` mirrors it. As in `train_pipeline`, every
    random choice is a function of (seed, position in the stream), and `skip_batches` (a resumed run's steps so far)
    positions the stream after the batches already trained on.

    Example:
        >>> import tensorflow as tf
        >>> ds = tf.data.Dataset.from_generator(
        ...     lambda: ((tf.zeros(s + (3,), tf.uint8), i) for i, s in enumerate([(16, 40), (40, 16), (24, 24)])),
        ...     output_signature=(tf.TensorSpec((None, None, 3), tf.uint8), tf.TensorSpec((), tf.int32)))
        >>> x, y = next(iter(naflex_train_pipeline(ds, patch_size=8, max_num_patches=16, batch_size=4,
        ...                                        num_classes=3, seed=0)))
        >>> x["patches"].shape, x["grid"].shape, y.shape
        (TensorShape([4, 16, 192]), TensorShape([4, 2]), TensorShape([4, 3]))
    """
    import numpy as np
    import tensorflow as tf


    if crop not in NAFLEX_CROPS:
        raise ValueError(f"`crop` must be one of {NAFLEX_CROPS}, got {crop!r}.")
    patch_size = check_positive_int("patch_size", patch_size)
    max_num_patches = check_max_num_patches(max_num_patches, patch_size)
    per_pipeline_batch = data._batch_size(batch_size, input_context)
    seed = int(np.random.SeedSequence().generate_state(1)[0] % 2**31) if seed is None else int(seed)
    parallel = tf.data.AUTOTUNE

    ds = data._shard(dataset, input_context)
    ds = ds.map(lambda image, label: (_rgb(image), data._checked_one_hot(label, num_classes)),
                num_parallel_calls=parallel)
    if cache:
        ds = ds.cache()
    ds = ds.repeat().shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).enumerate()
    if skip_batches and not buckets:
        ds = ds.skip(skip_batches * per_pipeline_batch)  # before augmenting: each example's seed is its index

    def augment(index, example):
        image, label = example
        element_seed = tf.stack([tf.constant(seed, tf.int64), index])
        crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(element_seed, 2))
        if crop == "inception":
            image = data.inception_box(image, crop_seed)
        height, width = naflex_size_graph(tf.shape(image)[0], tf.shape(image)[1], patch_size, max_num_patches)
        image = tf.image.resize(image, tf.stack([height, width]), method="bilinear", antialias=True)
        if crop == "shift":
            pixels = data.SHIFT_PIXELS
            padded = tf.pad(image, [[pixels, pixels], [pixels, pixels], [0, 0]])
            image = tf.image.stateless_random_crop(padded, tf.stack([height, width, 3]), seed=crop_seed)
        if flip:
            image = tf.image.stateless_random_flip_left_right(image, flip_seed)
        return naflex_example(tf.ensure_shape(image, (None, None, 3)), patch_size, max_num_patches,
                              resize=False), label

    ds = ds.map(augment, num_parallel_calls=parallel)
    ds = _batched(ds, per_pipeline_batch, max_num_patches, buckets, drop_remainder=True)
    if skip_batches and buckets:
        # A bucket's batch gathers examples from across the stream: only skipping whole batches replays exactly
        # what an uninterrupted run trains on next (the skipped examples are decoded and cut again, not trained).
        ds = ds.skip(skip_batches)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(data._options())


def naflex_eval_pipeline(dataset, *, patch_size: int, max_num_patches: int, batch_size: int, num_classes: int,
                         buckets=None, cache: bool = True, input_context=None):
    """`data.eval_pipeline` for a flexible model: each example once, fit to `max_num_patches` patches at
    its own aspect ratio (no crop), batched (padded to N, or to its bucket's length with `buckets`; the last batch
    of each may be smaller).

    Example:
        >>> import tensorflow as tf
        >>> ds = tf.data.Dataset.from_tensor_slices((tf.zeros((5, 16, 40, 3), tf.uint8), tf.range(5) % 2))
        >>> [b["grid"].numpy()[0].tolist() for b, _ in naflex_eval_pipeline(ds, patch_size=8, max_num_patches=16,
        ...                                                                  batch_size=4, num_classes=2)]
        [[2, 5], [2, 5]]
    """
    import tensorflow as tf


    patch_size = check_positive_int("patch_size", patch_size)
    max_num_patches = check_max_num_patches(max_num_patches, patch_size)
    per_pipeline_batch = data._batch_size(batch_size, input_context)
    ds = data._shard(dataset, input_context)
    ds = ds.map(lambda image, label: (naflex_example(_rgb(image), patch_size, max_num_patches),
                                      data._checked_one_hot(label, num_classes)),
                num_parallel_calls=tf.data.AUTOTUNE)
    if cache:
        ds = ds.cache()
    ds = _batched(ds, per_pipeline_batch, max_num_patches, buckets, drop_remainder=False)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(data._options())
