"""Input pipelines for training and evaluating a ViT: tfds (or any `tf.data`) -> augmented, batched images.

Train: vit_jax's inception-style random crop (`sample_distorted_bounding_box`, area 5%-100%), resize, random
flip (for small images with a blank border, `crop="shift"`: a random shift of up to one pixel instead),
optionally RandAugment and MixUp (Keras core layers, run here in `tf.data`, never in the jitted model).
Eval: a plain resize to the model's size, as vit_jax evaluates. Images leave as float32 RGB in [0, 255] (the
models rescale inside the graph) and labels as one-hot float32, so MixUp's soft labels and plain labels share
one loss.

With a seed, every random choice is a stateless function of (seed, position of the example in the stream), so
a run is reproducible and a resumed run can skip exactly the examples it has already seen.

Example:
    >>> from vit_keras.training import data
    >>> split = data.load("vit_keras_digits", "train")
    >>> ds = data.train_pipeline(split.dataset, image_size=16, batch_size=64,
    ...                          num_classes=split.num_classes, seed=0)
    >>> images, labels = next(iter(ds))
    >>> images.shape, labels.shape
    (TensorShape([64, 16, 16, 3]), TensorShape([64, 10]))
"""

from __future__ import annotations

import contextlib
import difflib
import io
import logging

import numpy as np

from vit_keras.training.split import Split  # defined apart so that local_data can make one too

INCEPTION_CROP_AREA = (0.05, 1.0)
SHIFT_PIXELS = 1
CROPS = ("inception", "resize", "shift")
LABEL_CHECK_EXAMPLES = 4096


def _tf():
    import tensorflow as tf

    return tf


def _tfds_builder(name: str, data_dir: str | None):
    import tensorflow_datasets as tfds

    import vit_keras.datasets  # noqa: F401  (registers the bundled datasets)

    try:
        return tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as error:
        known = tfds.list_builders(with_community_datasets=False)
        close = difflib.get_close_matches(name.split(":")[0].split("/")[0], known, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"Unknown tfds dataset {name!r}.{hint} Pass a name from `tfds.list_builders()` "
            "(e.g. 'cifar10', 'oxford_flowers102', 'vit_keras_digits'), an existing folder of class subfolders, a "
            ".csv / .jsonl file of path,label rows, or a tf.data.Dataset of (image, label)."
        ) from error


def _prepare(builder) -> None:
    """Download and prepare a tfds dataset. tfds prints "Downloading and preparing dataset ..." to standard output
    on the first preparation in a data directory; for vit_keras' bundled datasets, which are generated here and
    downloaded from nowhere, that line is wrong, so it goes to the log instead (a program's or an example's output
    then does not depend on whether the data directory was prepared before)."""
    if not type(builder).__module__.startswith("vit_keras."):
        builder.download_and_prepare()
        return
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        builder.download_and_prepare()
    logging.getLogger(__name__).info("Prepared the bundled dataset %s in %s. %s", builder.name, builder.data_dir,
                                     printed.getvalue().strip())


def load(source, split: str = "train", *, data_dir: str | None = None, num_classes: int | None = None,
         download: bool = True, class_names=None) -> Split:
    """Load one split of a tfds dataset by name, of your own images, or wrap a `tf.data.Dataset` of `(image, label)`.

    `split` takes tfds split strings ("train", "train[:90%]", "test+validation"). Unknown names or splits raise
    a `ValueError` that lists what exists. For a `tf.data.Dataset`, pass `num_classes`. A directory of class
    subfolders or a `.csv` / `.jsonl` file of `path,label` rows is read by `local_data.load` (with
    `class_names`, the classes of a model already trained; slices such as "train[90%:]" cut a seeded shuffle).

    Example:
        >>> split = load("vit_keras_digits", "test")
        >>> split.num_classes, split.num_examples
        (10, 360)
    """
    tf = _tf()
    if isinstance(source, tf.data.Dataset):
        dataset = source
        spec = dataset.element_spec
        if isinstance(spec, dict):
            if "image" not in spec or "label" not in spec:
                raise ValueError(f"A dataset of dicts needs 'image' and 'label' keys; it has {sorted(spec)}.")
            dataset = dataset.map(lambda e: (e["image"], e["label"]))
        elif not (isinstance(spec, tuple) and len(spec) == 2):
            raise ValueError("Pass a tf.data.Dataset of (image, label) pairs or of {'image', 'label'} dicts.")
        cardinality = int(dataset.cardinality())
        return Split(dataset, num_classes, cardinality if cardinality >= 0 else None, "tf.data.Dataset")
    from vit_keras.training import local_data

    if local_data.is_local_source(source):
        return local_data.load(source, split, class_names=class_names)
    if not isinstance(source, str):
        raise ValueError(f"`source` must be a tfds dataset name, a folder of class subfolders, a .csv / .jsonl file "
                         f"or a tf.data.Dataset, got {type(source).__name__}.")

    builder = _tfds_builder(source, data_dir)
    if download and not builder.info.splits:
        # Split metadata exists once the data is prepared (downloaded or, for bundled data, generated).
        _prepare(builder)
        download = False
    info = builder.info
    num_examples = None
    try:
        # Without split metadata (e.g. under `tfds.testing.mock_data`) `as_dataset` judges the split itself.
        num_examples = info.splits[split].num_examples if info.splits else None
    except (KeyError, ValueError, AssertionError) as error:
        raise ValueError(
            f"Dataset {source!r} has no split {split!r}: it has {sorted(info.splits)} "
            "(tfds slicing such as 'train[:90%]' works on those)."
        ) from error
    label_key = info.supervised_keys[1] if info.supervised_keys else "label"
    try:
        dataset_classes = getattr(info.features[label_key], "num_classes", None)
    except (KeyError, TypeError):
        dataset_classes = None
    if download:
        builder.download_and_prepare()
    dataset = builder.as_dataset(split=split, as_supervised=info.supervised_keys is not None, shuffle_files=False)
    if info.supervised_keys is None:
        dataset = dataset.map(lambda e: (e["image"], e["label"]))
    return Split(dataset, dataset_classes or num_classes, num_examples or None, f"{source}[{split}]")


def check_labels(split: Split, classes: int) -> None:
    """Raise a `ValueError` now, before any training, when the labels cannot fit a head of `classes` outputs.

    With a class count (tfds metadata, or `num_classes` given to `load`) that decides; otherwise the first
    examples are scanned. The pipelines also assert the range of every label they pass on.

    Example:
        >>> check_labels(load("vit_keras_digits", "test"), classes=10)
        >>> check_labels(load("vit_keras_digits", "test"), classes=5)
        Traceback (most recent call last):
        ValueError: ...
    """
    if split.num_classes is not None and split.num_classes > classes:
        raise ValueError(
            f"{split.name} has {split.num_classes} classes but the model's head has {classes}: "
            f"build the model with classes={split.num_classes}."
        )
    if split.num_classes is not None:
        return  # tfds' ClassLabel metadata bounds every label: no need to decode examples
    labels = np.concatenate(
        [np.atleast_1d(np.asarray(label)) for _, label in split.dataset.take(LABEL_CHECK_EXAMPLES).as_numpy_iterator()]
        or [np.zeros((0,), np.int64)]
    )
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(
            f"{split.name} has labels in [{labels.min()}, {labels.max()}], outside [0, {classes}) for a head of "
            f"{classes} classes: build the model with classes={int(labels.max()) + 1} or fix the labels."
        )


def _as_hw(image_size):
    if isinstance(image_size, int | np.integer):
        return int(image_size), int(image_size)
    height, width = image_size
    return int(height), int(width)


def _to_rgb(image):
    """uint8/float images with 1, 3 or 4 channels -> float32 RGB (grey repeated, alpha dropped)."""
    tf = _tf()
    channels = image.shape[-1]
    if channels == 1:
        image = tf.image.grayscale_to_rgb(image)
    elif channels == 4:
        image = image[..., :3]
    elif channels not in (3, None):
        raise ValueError(f"Images need 1 (grey), 3 (RGB) or 4 (RGBA) channels, got {channels}.")
    return tf.cast(image, tf.float32)


def _checked_one_hot(label, num_classes: int):
    tf = _tf()
    if label.shape.rank == 1:  # multi-hot labels of a multi-label dataset: already one row per example
        return tf.ensure_shape(tf.cast(label, tf.float32), (num_classes,))
    label = tf.cast(label, tf.int32)
    # tf.one_hot would silently turn an out-of-range label into an all-zero row.
    tf.debugging.assert_less(label, num_classes, message=f"label out of range for {num_classes} classes")
    tf.debugging.assert_non_negative(label, message="negative label")
    return tf.one_hot(label, num_classes, dtype=tf.float32)


def inception_crop(image, image_size, seed, area_range=INCEPTION_CROP_AREA):
    """vit_jax's train crop: a random box covering `area_range` of the image (aspect 3/4..4/3), resized.

    `seed` is a stateless seed (shape (2,) int); the same seed gives the same crop.

    Example:
        >>> import tensorflow as tf
        >>> inception_crop(tf.zeros((32, 32, 3)), (16, 16), tf.constant([0, 1])).shape
        TensorShape([16, 16, 3])
    """
    return _tf().image.resize(inception_box(image, seed, area_range), _as_hw(image_size))


def inception_box(image, seed, area_range=INCEPTION_CROP_AREA):
    """`inception_crop`'s random box, cut out at its own size (a NaFlex run resizes it to its patch budget).

    Example:
        >>> import tensorflow as tf
        >>> inception_box(tf.zeros((32, 32, 3)), tf.constant([0, 1])).shape.rank
        3
    """
    tf = _tf()
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image),
        bounding_boxes=tf.zeros([0, 0, 4], tf.float32),
        seed=seed,
        area_range=area_range,
        min_object_covered=0.0,
        use_image_if_no_bounding_boxes=True,
    )
    crop = tf.slice(image, begin, size)
    crop.set_shape([None, None, image.shape[-1]])  # the box keeps every channel
    return crop


def resize(image, image_size):
    """vit_jax's eval transform: a bilinear resize of the whole image to `image_size` (no crop).

    Example:
        >>> import tensorflow as tf
        >>> resize(tf.zeros((8, 8, 3)), 16).shape
        TensorShape([16, 16, 3])
    """
    return _tf().image.resize(image, _as_hw(image_size))


def random_shift(image, image_size, seed, pixels: int = SHIFT_PIXELS):
    """A bilinear resize to `image_size`, then a random translation by up to `pixels` in each direction.

    The resized image is zero-padded by `pixels` on every side and a window of `image_size` is cut from a random
    place in it: small images with a blank border (digits, glyphs) gain shifted copies without losing their
    ink to a crop. `seed` is a stateless seed (shape (2,) int); the same seed gives the same shift.

    Example:
        >>> import tensorflow as tf
        >>> random_shift(tf.zeros((8, 8, 3)), 12, tf.constant([0, 1])).shape
        TensorShape([12, 12, 3])
    """
    tf = _tf()
    height, width = _as_hw(image_size)
    image = tf.image.resize(image, (height, width))
    padded = tf.pad(image, [[pixels, pixels], [pixels, pixels], [0, 0]])
    return tf.image.stateless_random_crop(padded, [height, width, tf.shape(image)[-1]], seed=seed)


def _shard(dataset, input_context):
    if input_context is not None and input_context.num_input_pipelines > 1:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return dataset


def _batch_size(batch_size: int, input_context) -> int:
    if input_context is None:
        return batch_size
    if batch_size % input_context.num_replicas_in_sync:
        raise ValueError(
            f"Global batch size {batch_size} is not divisible by the {input_context.num_replicas_in_sync} "
            "replicas; pick a multiple of the replica count."
        )
    return input_context.get_per_replica_batch_size(batch_size)


def _options():
    tf = _tf()
    options = tf.data.Options()
    # Parallel work still yields examples in order: a run is a function of its seed, and a resumed run can
    # skip exactly what it has seen.
    options.deterministic = True
    # The pipelines shard themselves per input pipeline; automatic sharding on top would drop data.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def train_pipeline(dataset, *, image_size, batch_size: int, num_classes: int, crop: str = "inception",
                   flip: bool = True, randaugment: tuple[int, float] | None = None, mixup_alpha: float = 0.0,
                   shuffle_buffer: int = 10_000, cache: bool = True, seed: int | None = None,
                   deterministic: bool = False, skip_examples: int = 0, input_context=None):
    """The endless, shuffled, augmented train stream: batches of (float32 images in [0, 255], one-hot labels).

    Args:
        dataset: `tf.data.Dataset` of `(image, int label)`, e.g. `load(...).dataset`.
        image_size: int or (height, width) of the model input.
        batch_size: global batch size; under `tf.distribute` pass the strategy's `input_context` and each
            pipeline gets its shard of the data and the per-replica batch size.
        crop: "inception" (vit_jax train crop), "resize" (no crop) or "shift" (resize, then a random
            translation by up to `SHIFT_PIXELS` pixels: `random_shift`).
        randaugment: `(num_ops, factor)` for `keras.layers.RandAugment`, or None.
        mixup_alpha: > 0 enables `keras.layers.MixUp` with that Beta(alpha, alpha).
        seed: makes shuffling and every augmentation reproducible (examples always keep their order);
            `deterministic=True` also serialises RandAugment, whose layer draws from a stateful generator.
        skip_examples: examples of the stream already consumed (resuming a run), skipped before augmentation.

    Example:
        >>> import tensorflow as tf
        >>> ds = tf.data.Dataset.from_tensor_slices((tf.zeros((8, 8, 8, 1), tf.uint8), tf.range(8) % 2))
        >>> next(iter(train_pipeline(ds, image_size=16, batch_size=4, num_classes=2, seed=0)))[0].shape
        TensorShape([4, 16, 16, 3])
    """
    tf = _tf()
    if crop not in CROPS:
        raise ValueError(f"`crop` must be one of {CROPS}, got {crop!r}.")
    per_pipeline_batch = _batch_size(batch_size, input_context)
    seed = int(np.random.SeedSequence().generate_state(1)[0] % 2**31) if seed is None else int(seed)
    parallel = tf.data.AUTOTUNE
    size = _as_hw(image_size)

    ds = _shard(dataset, input_context)
    ds = ds.map(lambda image, label: (_to_rgb(image), _checked_one_hot(label, num_classes)),
                num_parallel_calls=parallel)
    if cache:
        ds = ds.cache()
    ds = ds.repeat().shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    ds = ds.enumerate()
    if skip_examples:
        ds = ds.skip(skip_examples)

    def augment(index, example):
        image, label = example
        element_seed = tf.stack([tf.constant(seed, tf.int64), index])
        crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(element_seed, 2))
        if crop == "inception":
            image = inception_crop(image, size, crop_seed)
        elif crop == "shift":
            image = random_shift(image, size, crop_seed)
        else:
            image = resize(image, size)
        if flip:
            image = tf.image.stateless_random_flip_left_right(image, flip_seed)
        return tf.ensure_shape(image, (*size, 3)), label

    ds = ds.map(augment, num_parallel_calls=parallel)
    if randaugment is not None:
        import keras

        num_ops, factor = randaugment
        layer = keras.layers.RandAugment(value_range=(0, 255), num_ops=int(num_ops), factor=float(factor), seed=seed)
        # The layer draws from its own seed generator: one call at a time keeps its draws in stream order.
        ds = ds.map(lambda image, label: (tf.clip_by_value(layer(image), 0.0, 255.0), label),
                    num_parallel_calls=1 if deterministic else parallel)
    ds = ds.batch(per_pipeline_batch, drop_remainder=True, num_parallel_calls=parallel)
    if mixup_alpha > 0:
        import keras

        mixup = keras.layers.MixUp(alpha=float(mixup_alpha), seed=seed)

        def mix(images, labels):
            mixed = mixup({"images": images, "labels": labels})
            return mixed["images"], mixed["labels"]

        ds = ds.map(mix, num_parallel_calls=parallel)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(_options())


def eval_pipeline(dataset, *, image_size, batch_size: int, num_classes: int, cache: bool = True,
                  input_context=None):
    """The eval stream: each example once, resized to `image_size`, batched (last batch may be smaller).

    Example:
        >>> import tensorflow as tf
        >>> ds = tf.data.Dataset.from_tensor_slices((tf.zeros((5, 8, 8, 3), tf.uint8), tf.range(5) % 2))
        >>> [int(x.shape[0]) for x, _ in eval_pipeline(ds, image_size=16, batch_size=4, num_classes=2)]
        [4, 1]
    """
    tf = _tf()
    per_pipeline_batch = _batch_size(batch_size, input_context)
    size = _as_hw(image_size)
    ds = _shard(dataset, input_context)
    ds = ds.map(lambda image, label: (resize(_to_rgb(image), size), _checked_one_hot(label, num_classes)),
                num_parallel_calls=tf.data.AUTOTUNE)
    if cache:
        ds = ds.cache()
    return ds.batch(per_pipeline_batch).prefetch(tf.data.AUTOTUNE).with_options(_options())


def to_numpy(dataset, limit: int | None = None):
    """Collect a batched `(images, labels)` pipeline into two numpy arrays (labels as class indices).

    Example:
        >>> import tensorflow as tf
        >>> ds = tf.data.Dataset.from_tensor_slices((np.zeros((6, 8, 8, 3), "uint8"), np.array([0, 1] * 3)))
        >>> x, y = to_numpy(eval_pipeline(ds, image_size=16, batch_size=4, num_classes=2))
        >>> x.shape, y.shape
        ((6, 16, 16, 3), (6,))
    """
    images, labels, seen = [], [], 0
    for x, y in dataset.as_numpy_iterator():
        images.append(x)
        labels.append(y.argmax(-1) if y.ndim == 2 else y)
        seen += len(x)
        if limit is not None and seen >= limit:
            break
    images, labels = np.concatenate(images), np.concatenate(labels)
    return (images[:limit], labels[:limit]) if limit is not None else (images, labels)
