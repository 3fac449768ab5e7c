"""NaFlex inputs inside a TensorFlow graph: one image of any size -> the `patches`, `grid` and `mask` a flexible model
takes (`vit_keras.ViT(flexible=True)`), for `tf.data` pipelines and exported signatures.

Each image is resized to `naflex_size`'s size (the same bisection, in float64, so the same size as transformers'
processor), with bilinear antialiased `tf.image.resize` (as `vit_keras.images.naflex_resize`), cut into patches in
(row, column, channel) order and padded to `max_num_patches`: every example has the same shapes, so a dataset of
images of mixed sizes batches with a plain `batch()`.

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

NAFLEX_EPS = 1e-5  # transformers' get_image_size_for_max_num_patches bisection width


def naflex_size_graph(height, width, patch_size: int, max_num_patches: int, eps: float = NAFLEX_EPS):
    """`vit_keras.preprocessing.naflex_size` as TensorFlow ops (`height`, `width` may be tensors): the same float64
    bisection, so the same (height, width), as an int32 pair.

    Example:
        >>> [int(v) for v in naflex_size_graph(480, 640, 16, 256)]
        [224, 288]
    """
    import tensorflow as tf

    height, width = tf.cast(height, tf.float64), tf.cast(width, tf.float64)
    patch = tf.constant(float(patch_size), tf.float64)

    def side(scale, size):
        return tf.maximum(patch, tf.math.ceil(size * scale / patch) * patch)

    def body(low, high):
        scale = (low + high) / 2
        fits = (side(scale, height) / patch) * (side(scale, width) / patch) <= float(max_num_patches)
        return tf.where(fits, scale, low), tf.where(fits, high, scale)

    low, _ = tf.while_loop(lambda low, high: (high - low) >= eps, body,
                           (tf.constant(eps / 10, tf.float64), tf.constant(100.0, tf.float64)))
    return tf.cast(side(low, height), tf.int32), tf.cast(side(low, width), tf.int32)


def naflex_example(image, patch_size: int, max_num_patches: int, resize: bool = True) -> dict:
    """One (H, W, C) image tensor -> `{"patches": (N, P·P·C) float32, "grid": (2,) int32, "mask": (N,) int32}` with
    N = `max_num_patches`. `resize=False` takes the image as it is (its sides multiples of `patch_size`, at most N
    patches; otherwise the graph fails with an `InvalidArgument` naming the sizes).

    Example:
        >>> import tensorflow as tf
        >>> naflex_example(tf.zeros((24, 40, 3)), 8, 16, resize=False)["grid"].numpy().tolist()
        [3, 5]
    """
    import tensorflow as tf

    patch_size = check_positive_int("patch_size", patch_size)
    max_num_patches = check_positive_int("max_num_patches", max_num_patches)
    image = tf.cast(image, tf.float32)
    channels = image.shape[-1]
    if channels is None:
        raise ValueError("naflex_example needs images with a known number of channels, e.g. (None, None, 3).")
    if resize:
        height, width = naflex_size_graph(tf.shape(image)[0], tf.shape(image)[1], patch_size, max_num_patches)
        image = tf.image.resize(image, tf.stack([height, width]), method="bilinear", antialias=True)
    height, width = tf.shape(image)[0], tf.shape(image)[1]
    rows, cols = height // patch_size, width // patch_size
    count = rows * cols
    checks = [tf.debugging.assert_equal(
        tf.stack([height % patch_size, width % patch_size]), 0,
        message=f"NaFlex: the image's sides must be multiples of the patch size {patch_size}"),
        tf.debugging.assert_positive(count, message=f"NaFlex: the image is smaller than one {patch_size}x{patch_size} "
                                     "patch"),
        tf.debugging.assert_less_equal(count, max_num_patches,
                                       message=f"NaFlex: the image has more than max_num_patches {max_num_patches} "
                                       "patches")]
    with tf.control_dependencies(checks):
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
    max_num_patches = check_positive_int("max_num_patches", max_num_patches)

    def convert(image, *rest):
        example = naflex_example(image, patch_size, max_num_patches, resize=resize)
        return (example, *rest) if rest else example

    return convert
