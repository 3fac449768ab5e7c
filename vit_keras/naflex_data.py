"""NaFlex inputs inside a TensorFlow graph: one image of any size -> the `patches`, `grid` and `mask` a flexible model
takes (`vit_keras.ViT(flexible=True)`), for `tf.data` pipelines and exported signatures.

Each image is resized to `naflex_size`'s size (`vit_keras.preprocessing.naflex_size_graph`: the same bisection, in
float64, so the same size as transformers' processor), with bilinear antialiased `tf.image.resize` (as
`vit_keras.images.naflex_resize`), cut into patches in (row, column, channel) order and padded to `max_num_patches`:
every example has the same shapes, so a dataset of images of mixed sizes batches with a plain `batch()`.

Example:
    >>> import tensorflow as tf
    >>> ds = tf.data.Dataset.from_generator(lambda: (tf.zeros(s + (3,)) for s in [(100, 700), (64, 48)]),
    ...                                     output_signature=tf.TensorSpec((None, None, 3), tf.float32))
    >>> batch = next(iter(ds.map(naflex_map(16, 64)).batch(2)))
    >>> batch["patches"].shape, batch["grid"].numpy().tolist()
    (TensorShape([2, 64, 768]), [[3, 21], [9, 7]])
"""

from __future__ import annotations

from vit_keras.configs import check_positive_int
from vit_keras.preprocessing import check_max_num_patches, naflex_size_graph


def flexible_patch_size(model) -> int | None:
    """The patch size of a flexible (NaFlex) model (`vit_keras.ViT(flexible=True)`), None for a model of images.

    Example:
        >>> import vit_keras
        >>> flexible_patch_size(vit_keras.ViT(flexible=True, patch_size=8, hidden_size=48, num_layers=1,
        ...                                   num_heads=3, mlp_dim=96, classes=3))
        8
    """
    from vit_keras.layers.flexible import FlexiblePatchEncoder

    encoders = [layer for layer in model.layers if isinstance(layer, FlexiblePatchEncoder)]
    return int(encoders[0].patch_size) if encoders else None


def naflex_pixels_graph(image):
    """An image tensor as float32 RGB values in [0, 255]: uint16 (16-bit) images scaled from 0..65535, as
    `vit_keras.images.naflex_pixels` does; every other dtype cast as it is.

    Example:
        >>> import tensorflow as tf
        >>> naflex_pixels_graph(tf.constant([0, 65535], tf.uint16)).numpy().tolist()
        [0.0, 255.0]
    """
    import tensorflow as tf

    from vit_keras.images import UINT16_SCALE

    image = tf.convert_to_tensor(image)
    if image.dtype == tf.uint16:
        return tf.cast(image, tf.float32) / UINT16_SCALE
    return tf.cast(image, tf.float32)


def _check_static_size(image, patch_size: int, max_num_patches: int) -> None:
    """Refuse, while the graph is built, an image whose known sides cannot be cut as they are: the ValueError
    `vit_keras.images.naflex_patches` raises for the same image."""
    from vit_keras.images import not_whole_patches, smaller_than_a_patch, too_many_patches

    height, width = image.shape[0], image.shape[1]
    if height is None or width is None:
        return
    if height < patch_size or width < patch_size:
        raise ValueError(smaller_than_a_patch("the image", height, width, patch_size))
    if height % patch_size or width % patch_size:
        raise ValueError(not_whole_patches("the image", height, width, patch_size))
    rows, cols = height // patch_size, width // patch_size
    if rows * cols > max_num_patches:
        raise ValueError(too_many_patches("the image", rows, cols, rows * cols, max_num_patches))


def _size_checks(height, width, patch_size: int, max_num_patches: int) -> list:
    """Run-time checks of an image's sides, failing with `naflex_patches`' explanation (the sizes filled in)."""
    import tensorflow as tf

    from vit_keras.images import not_whole_patches, smaller_than_a_patch, too_many_patches

    rows, cols = height // patch_size, width // patch_size
    too_small = tf.logical_or(height < patch_size, width < patch_size)
    ragged = tf.logical_and(tf.logical_not(too_small),
                            tf.logical_or(height % patch_size != 0, width % patch_size != 0))
    too_long = tf.logical_and(tf.logical_not(tf.logical_or(too_small, ragged)), rows * cols > max_num_patches)

    def check(failed, template, values):
        # "{}" in the explanation is where TensorFlow writes each value.
        return tf.debugging.Assert(tf.logical_not(failed), [tf.strings.format(template, values)])

    return [check(too_small, smaller_than_a_patch("the image", "{}", "{}", patch_size), [height, width]),
            check(ragged, not_whole_patches("the image", "{}", "{}", patch_size), [height, width]),
            check(too_long, too_many_patches("the image", "{}", "{}", "{}", max_num_patches),
                  [rows, cols, rows * cols])]


def naflex_example(image, patch_size: int, max_num_patches: int, resize: bool = True) -> dict:
    """One (H, W, C) image tensor -> `{"patches": (N, P·P·C) float32, "grid": (2,) int32, "mask": (N,) int32}` with
    N = `max_num_patches` (at most `vit_keras.preprocessing.MAX_NUM_PATCHES`). Pixel values are RGB in [0, 255];
    uint16 (16-bit) images are scaled from 0..65535 (`naflex_pixels_graph`).

    `resize=False` takes the image as it is: its sides must be multiples of `patch_size`, at most N patches. An image
    that is not is refused with `vit_keras.images.naflex_patches`' explanation: a `ValueError` while the graph is
    built when its sides are known, otherwise an `InvalidArgumentError` when it runs.

    Example:
        >>> import tensorflow as tf
        >>> naflex_example(tf.zeros((24, 40, 3)), 8, 16, resize=False)["grid"].numpy().tolist()
        [3, 5]
    """
    import tensorflow as tf

    patch_size = check_positive_int("patch_size", patch_size)
    max_num_patches = check_max_num_patches(max_num_patches, patch_size)
    image = tf.convert_to_tensor(image)
    rank = image.shape.rank
    if rank is not None and rank != 3:
        hint = {2: "; add the channel axis to a grayscale image (image[..., None])",
                4: "; map over single images, before batch()"}.get(rank, "")
        raise ValueError(f"naflex_example takes one (height, width, channels) image, got shape "
                         f"{tuple(image.shape)}{hint}.")
    if 0 in tuple(image.shape[:2]):
        raise ValueError(f"naflex_example got an image of {image.shape[0]}x{image.shape[1]} pixels, which has nothing "
                         "to cut into patches; drop empty images from the dataset.")
    empty = tf.equal(tf.size(image), 0)
    with tf.control_dependencies([tf.debugging.Assert(tf.logical_not(empty), [
            "naflex_example got an image with no pixels (a side of 0), which has nothing to cut into patches; "
            "drop empty images from the dataset. Its shape:", tf.shape(image)])]):
        image = tf.identity(image)
    image = naflex_pixels_graph(image)
    channels = image.shape[-1]
    if channels is None:
        raise ValueError("naflex_example needs images with a known number of channels, e.g. (None, None, 3).")
    if resize:
        height, width = naflex_size_graph(tf.shape(image)[0], tf.shape(image)[1], patch_size, max_num_patches)
        image = tf.image.resize(image, tf.stack([height, width]), method="bilinear", antialias=True)
    else:
        _check_static_size(image, patch_size, max_num_patches)
    height, width = tf.shape(image)[0], tf.shape(image)[1]
    rows, cols = height // patch_size, width // patch_size
    count = rows * cols
    with tf.control_dependencies(_size_checks(height, width, patch_size, max_num_patches)):
        patches = tf.reshape(image, tf.stack([rows, patch_size, cols, patch_size, channels]))
    patches = tf.reshape(tf.transpose(patches, (0, 2, 1, 3, 4)), (-1, patch_size * patch_size * channels))
    patches = tf.pad(patches, [[0, max_num_patches - count], [0, 0]])
    patches = tf.ensure_shape(patches, (max_num_patches, patch_size * patch_size * channels))
    mask = tf.cast(tf.range(max_num_patches) < count, tf.int32)
    return {"patches": patches, "grid": tf.stack([rows, cols]), "mask": mask}


def naflex_map(patch_size: int, max_num_patches: int, resize: bool = True):
    """A `tf.data` map function: an image, or an `(image, label)` pair, -> the NaFlex example (and the label); see
    `naflex_example`. Batch the mapped dataset with `batch()`: every example is padded to `max_num_patches`.

    Example:
        >>> import tensorflow as tf
        >>> images_and_labels = tf.data.Dataset.from_tensor_slices((tf.zeros((4, 48, 80, 3)), [3, 7, 1, 0]))
        >>> examples, labels = next(iter(images_and_labels.map(naflex_map(16, 256)).batch(2)))
        >>> examples["patches"].shape, examples["grid"].numpy().tolist(), labels.numpy().tolist()
        (TensorShape([2, 256, 768]), [[12, 20], [12, 20]], [3, 7])
    """
    patch_size = check_positive_int("patch_size", patch_size)
    max_num_patches = check_max_num_patches(max_num_patches, patch_size)

    def convert(image, *rest):
        example = naflex_example(image, patch_size, max_num_patches, resize=resize)
        return (example, *rest) if rest else example

    return convert


def _check_boundaries(boundaries) -> tuple[int, ...]:
    values = tuple(boundaries) if isinstance(boundaries, tuple | list) else (boundaries,)
    if not values:
        raise ValueError("`boundaries` is empty: pass the sequence lengths to pad batches to, e.g. (64, 128, 256).")
    checked = tuple(check_positive_int("bucket boundary", value) for value in values)
    if any(b <= a for a, b in zip(checked, checked[1:])):
        raise ValueError(f"NaFlex bucket boundaries must increase, got {list(checked)}: e.g. (64, 128, 256).")
    return checked


def bucket_boundaries(max_num_patches: int, multiple: int = 16) -> tuple[int, ...]:
    """Sequence lengths every `multiple` patches up to `max_num_patches` (which is always the last), for
    `naflex_buckets`.

    Example:
        >>> bucket_boundaries(256, 64)
        (64, 128, 192, 256)
        >>> bucket_boundaries(40, 16)
        (16, 32, 40)
    """
    max_num_patches = check_positive_int("max_num_patches", max_num_patches)
    multiple = check_positive_int("multiple", multiple)
    return (*range(multiple, max_num_patches, multiple), max_num_patches)


def naflex_buckets(boundaries, batch_size: int, drop_remainder: bool = False):
    """A `tf.data` transformation (`dataset.apply(...)`) that batches NaFlex examples (`naflex_map`'s, padded to
    N) with others of about the same real patch count and pads each batch only to its bucket's length: the
    smallest of `boundaries` that holds its longest image (N when none does), so that less compute goes to padding.
    Examples keep their order within a bucket; batches come out as their bucket fills (a finite dataset's last,
    partial batches at its end, unless `drop_remainder`).

    A flexible model takes any sequence length, and a real token's output does not depend on the padding.

    Example:
        >>> import tensorflow as tf
        >>> ds = tf.data.Dataset.from_generator(lambda: (tf.zeros(s + (3,)) for s in [(8, 8), (32, 32), (8, 16)]),
        ...                                     output_signature=tf.TensorSpec((None, None, 3), tf.float32))
        >>> batches = ds.map(naflex_map(8, 16, resize=False)).apply(naflex_buckets((4, 8), batch_size=2))
        >>> [tuple(b["patches"].shape[:2]) for b in batches]
        [(2, 4), (1, 16)]
    """
    import tensorflow as tf

    boundaries = _check_boundaries(boundaries)
    batch_size = check_positive_int("batch_size", batch_size)

    def apply(dataset):
        spec = dataset.element_spec
        example = spec[0] if isinstance(spec, tuple) else spec
        if not isinstance(example, dict) or "mask" not in example:
            raise ValueError("naflex_buckets batches NaFlex examples: map the images with naflex_map(...) first.")
        length = example["mask"].shape[-1]
        if length is None:
            raise ValueError("naflex_buckets needs examples padded to one length N (naflex_map's output).")
        if boundaries[-1] > length:
            raise ValueError(f"NaFlex bucket boundary {boundaries[-1]} is longer than the examples' length N={length}"
                             f" (max_num_patches): pass boundaries up to {length}.")
        lengths = tf.constant(boundaries + ((length,) if boundaries[-1] < length else ()), tf.int64)

        def first(element, *rest):
            return element

        def bucket(*element):
            count = tf.reduce_sum(tf.cast(first(*element)["mask"] != 0, tf.int64))
            return tf.reduce_sum(tf.cast(lengths < count, tf.int64))  # the smallest length that holds the image

        def trim(key, batch):
            bucket_length = lengths[key]

            def cut(example, *rest):
                example = dict(example, patches=example["patches"][:, :bucket_length],
                               mask=example["mask"][:, :bucket_length])
                return (example, *rest) if rest else example

            return batch.map(cut)

        return dataset.group_by_window(
            key_func=bucket,
            reduce_func=lambda key, window: trim(key, window.batch(batch_size, drop_remainder=drop_remainder)),
            window_size=batch_size)

    return apply


def naflex_images(patches, grid, patch_size: int):
    """The images a NaFlex batch holds, put back together from their patches: a float32 NumPy array
    (batch, max rows · P, max cols · P, C), each image in the top-left corner, zeros around it (TensorBoard's
    input images of a NaFlex run).

    Example:
        >>> import numpy as np
        >>> batch = naflex_example(np.arange(16 * 24 * 3, dtype="float32").reshape(16, 24, 3), 8, 8, resize=False)
        >>> images = naflex_images(batch["patches"][None], batch["grid"][None], 8)
        >>> images.shape, bool((images[0] == np.arange(16 * 24 * 3).reshape(16, 24, 3)).all())
        ((1, 16, 24, 3), True)
    """
    import numpy as np

    patches, grid = np.asarray(patches, np.float32), np.asarray(grid, np.int64)
    channels = patches.shape[-1] // (patch_size * patch_size)
    height, width = int(grid[:, 0].max()) * patch_size, int(grid[:, 1].max()) * patch_size
    images = np.zeros((len(patches), height, width, channels), np.float32)
    for index, (rows, cols) in enumerate(grid.tolist()):
        image = patches[index, :rows * cols].reshape(rows, cols, patch_size, patch_size, channels)
        images[index, :rows * patch_size, :cols * patch_size] = image.transpose(0, 2, 1, 3, 4).reshape(
            rows * patch_size, cols * patch_size, channels)
    return images
