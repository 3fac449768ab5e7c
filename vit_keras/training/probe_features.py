"""Frozen features for the linear probe: one pooled vector per image, computed once per split and cached.

`pooled_features(model, pooling)` is a Keras model on `model`'s images (sharing its layers and weights) that returns
one vector per image:

- `"model"`: the model's own pooled embedding, what `feature_extractor` returns (`pre_logits`, else the pooled
  token; vit_jax's few-shot probe reads it);
- `"token"`: the class token of the last block, after the final norm where the model has one (DINOv2's
  `x_norm_clstoken`);
- `"avg"`: the mean of the last block's patch tokens (class token and registers left out), after the final norm;
- `"token+avg"`: both, concatenated (the DINOv2 linear evaluation's `avgpool=True` features): twice the width.

`split_features` runs it over a dataset split once and keeps the result as NumPy arrays: in memory for the rest of
the process, and on disk under `cache_dir` (a `.npz` file, written atomically, read without pickle). The cache key is
a SHA-256 of the model's architecture and weights, the data's identity (a tfds name's version and split; the bytes of
every example of a `tf.data.Dataset`), the image size and the pooling, so changed weights or data never reuse stale
features.

Example:
    >>> extractor = pooled_features(tiny_model, "token+avg")  # hidden size 48: class token + mean patch token
    >>> extractor.output_shape
    (None, 96)
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import weakref
import zipfile

import numpy as np

POOLINGS = ("model", "token", "avg", "token+avg")
# Bump when what the features are changes (pooling, preprocessing): old cache files then stop matching.
FEATURE_FORMAT = 1
# The memory cache keeps the newest splits up to this many and this many bytes of features (the newest one always,
# whatever its size: the probe holds it anyway).
MEMORY_ENTRIES = 8
MEMORY_BYTES = 2 * 1024**3
_memory: collections.OrderedDict = collections.OrderedDict()


def _check_pooling(pooling) -> None:
    if pooling not in POOLINGS:
        raise ValueError(f"pooling={pooling!r} is not a probe pooling; use one of {POOLINGS}: 'token' (class token), "
                         "'avg' (mean patch token), 'token+avg' (both, DINOv2's linear evaluation) or 'model' (the "
                         "model's own pooled output).")


def pooled_features(model, pooling: str = "token+avg"):
    """A Keras model from `model`'s images to one feature vector per image (see the module's pooling list).

    Example:
        >>> pooled_features(tiny_model, "avg").output_shape
        (None, 48)
        >>> pooled_features(tiny_model, "mean")
        Traceback (most recent call last):
        ValueError: pooling='mean' is not a probe pooling; use one of ('model', 'token', 'avg', 'token+avg'): ...
    """
    import keras

    from vit_keras.features import intermediate_model
    from vit_keras.layers.pooling import TokenPooling
    from vit_keras.training.evaluation import feature_extractor
    from vit_keras.vision_transformer import config_of

    _check_pooling(pooling)
    if isinstance(model.input, dict):
        raise ValueError(f"{model.name!r} is a flexible (NaFlex) model: the linear probe takes images of one size. "
                         "Build the backbone with flexible=False (the same weights load) to probe it.")
    if pooling == "model":
        try:
            return feature_extractor(model)
        except ValueError:
            raise ValueError(f"pooling='model' reads the model's pooled output, and {model.name!r} has none (built "
                             "with include_top=False and pooling=None: its output is the token sequence). Pass "
                             "pooling='token', 'avg' or 'token+avg' to pool its tokens for the probe.") from None
    try:
        config = config_of(model)
    except (ValueError, AttributeError, KeyError):
        raise ValueError(f"pooling={pooling!r} reads the tokens of a model built by vit_keras, which {model.name!r} "
                         "is not; pass pooling='model' (its pooled output).") from None
    if "token" in pooling and not config.class_token:
        raise ValueError(f"pooling={pooling!r} needs a class token, and {model.name!r} has none (classifier='gap'); "
                         "pass pooling='avg' (the mean patch token) or 'model'.")
    has_norm = any(layer.name == "encoder_norm" for layer in model.layers)
    tokens = intermediate_model(model, 1, norm=has_norm, output_format="NLC", return_prefix_tokens=True)
    (patches, prefix), = tokens.output
    outputs = []
    if "token" in pooling:
        outputs.append(TokenPooling("token", num_prefix_tokens=config.num_prefix_tokens,
                                    num_tokens=config.num_class_tokens, name="probe_class_token")(prefix))
    if "avg" in pooling:
        outputs.append(TokenPooling("avg", num_prefix_tokens=0, name="probe_mean_patch_token")(patches))
    vector = outputs[0] if len(outputs) == 1 else keras.layers.Concatenate(name="probe_features")(outputs)
    return keras.Model(model.input, vector, name=f"{model.name}_probe_features")


def weights_digest(model) -> str:
    """SHA-256 of `model`'s architecture (its `ViTConfig`, else its layer classes) and every weight's bytes.

    Example:
        >>> len(weights_digest(tiny_model))
        64
    """
    import keras

    from vit_keras.vision_transformer import config_of

    digest = hashlib.sha256()
    try:
        digest.update(repr(config_of(model)).encode())
    except (ValueError, AttributeError, KeyError):
        digest.update(" ".join(type(layer).__name__ for layer in model.layers).encode())
    digest.update(repr(model.input_shape).encode())
    for weight in model.weights:
        value = np.ascontiguousarray(keras.ops.convert_to_numpy(weight))
        digest.update(f"{value.shape}{value.dtype}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


DIGEST_BATCH = 256


def _content_digest(dataset) -> str:
    """SHA-256 of every (image, label) of a `tf.data.Dataset`, in order: its identity when it has no name.

    Examples of one fixed shape are read in batches (one per example costs a Python round trip each); the digest
    then covers the same bytes in the same order, with each batch's shape.
    """
    digest = hashlib.sha256()
    if all(spec.shape.is_fully_defined() for spec in dataset.element_spec):
        dataset = dataset.batch(DIGEST_BATCH)
    for image, label in dataset.as_numpy_iterator():
        for value in (np.asarray(image), np.asarray(label)):
            digest.update(f"{value.shape}{value.dtype}".encode())
            digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()


def load_split(source, split: str, data_dir: str | None = None):
    """`(data.Split, identity)`: the split to read and a string that changes whenever its examples may.

    A tfds name is identified by name, version and split; your own images (a folder of class subfolders, a `.csv`
    or `.jsonl` file), a `tf.data.Dataset` or a `data.Split` by a digest of its examples (read once, without the
    model).

    Example:
        >>> loaded, identity = load_split("vit_keras_digits", "test")
        >>> loaded.num_examples, identity.startswith("tfds:vit_keras_digits:")
        (360, True)
    """
    from vit_keras.training import data, local_data

    if isinstance(source, data.Split):
        return source, f"examples:{_content_digest(source.dataset)}"
    try:
        loaded = data.load(source, split, data_dir=data_dir)
    except ValueError as error:
        if "corresponds to no data" not in str(error):  # tfds' words for a slice such as 'train[:0]'
            raise
        raise ValueError(f"Split {split!r} of {source!r} selects no examples; pass a split with images (tfds "
                         "slicing such as 'train[:90%]' must leave some).") from None
    if isinstance(source, str) and not local_data.is_local_source(source):
        version = data._tfds_builder(source, data_dir).info.version
        return loaded, f"tfds:{source}:{version}:{split}"
    return loaded, f"examples:{_content_digest(loaded.dataset)}"


def cache_key(model_digest: str, identity: str, pooling: str, image_size) -> str:
    """The SHA-256 naming one split's features: model, data, pooling, image size and feature format together.

    Example:
        >>> cache_key("a" * 64, "tfds:vit_keras_digits:1.0.0:test", "avg", (32, 32)) == cache_key(
        ...     "b" * 64, "tfds:vit_keras_digits:1.0.0:test", "avg", (32, 32))
        False
    """
    text = json.dumps([FEATURE_FORMAT, model_digest, identity, pooling, [int(s) for s in image_size]])
    return hashlib.sha256(text.encode()).hexdigest()


def compute_features(extractor, split, image_size, batch_size: int):
    """Run `extractor` over every example of `split` (resized to `image_size` by the eval pipeline): (features
    float32 (N, D), labels int64 (N,)).

    Example:
        >>> x, y = compute_features(pooled_features(tiny_model, "avg"), digits_test, (32, 32), 128)
        >>> x.shape, y.shape
        ((360, 48), (360,))
    """
    import tensorflow as tf

    from vit_keras.training import data

    classes = split.num_classes or _label_bound(split)
    pipeline = data.eval_pipeline(split.dataset, image_size=tuple(image_size), batch_size=batch_size,
                                  num_classes=classes, cache=False)
    forward = _forward(extractor)
    features, labels, full = [], [], None
    try:
        for images, one_hot in pipeline.as_numpy_iterator():
            count = len(one_hot)
            full = full or count
            if count < full:  # padded to the first batch's size: the compiled program is reused, not recompiled
                images = np.concatenate([images, np.zeros((full - count, *images.shape[1:]), images.dtype)])
            features.append(np.asarray(forward(images), np.float32)[:count])
            labels.append(one_hot.argmax(-1))
    except tf.errors.InvalidArgumentError as error:
        raise ValueError(f"{split.name}: a label lies outside [0, {classes}) ({error.message.splitlines()[0]}); "
                         "fix the labels or pass the split's num_classes.") from None
    if not labels:
        return np.zeros((0, int(extractor.output_shape[-1])), np.float32), np.zeros((0,), np.int64)
    return np.concatenate(features), np.concatenate(labels).astype(np.int64)


_forwards: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _forward(extractor):
    """`extractor`'s compiled forward pass (`evaluation.inference_function`), made once per extractor: the train and
    test splits share one compilation."""
    from vit_keras.training.evaluation import inference_function

    if extractor not in _forwards:
        _forwards[extractor] = inference_function(extractor)
    return _forwards[extractor]


def _label_bound(split) -> int:
    """One more than the largest label of a split without class metadata (labels must be non-negative)."""
    labels = [np.asarray(label).reshape(-1) for _, label in split.dataset.as_numpy_iterator()]
    labels = np.concatenate(labels) if labels else np.zeros((0,), np.int64)
    if labels.size and labels.min() < 0:
        raise ValueError(f"{split.name} has a negative label ({labels.min()}); labels are class indices 0..K-1.")
    return int(labels.max()) + 1 if labels.size else 1


def _cache_path(cache_dir: str, key: str, pooling: str) -> str:
    return os.path.join(cache_dir, f"features-{pooling.replace('+', '-')}-{key[:32]}.npz")


def _read_cache(path: str, key: str):
    try:
        with np.load(path, allow_pickle=False) as stored:
            if str(stored["key"]) != key:
                return None
            return stored["features"], stored["labels"]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):  # absent, truncated or not ours: compute afresh
        return None


def _write_cache(path: str, key: str, features, labels) -> None:
    from vit_keras.files import atomic_file

    with atomic_file(path) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, key=np.array(key), features=features, labels=labels)


def clear_memory_cache() -> None:
    """Forget the features kept in memory (files under a `cache_dir` stay).

    Example:
        >>> clear_memory_cache()
    """
    _memory.clear()


def split_features(extractor, model_digest: str, source, split: str = "train", *, pooling: str,
                   cache_dir: str | None = None, batch_size: int = 256, data_dir: str | None = None,
                   image_size=None, role: str = "probe"):
    """One split's features, from memory, from `cache_dir`, or computed (then kept in both); a `ValueError` for a
    split without examples (`role`, e.g. "train", names it in the message).

    Returns `(features (N, D) float32, labels (N,) int64, num_classes or None, origin)`, origin one of "memory",
    "disk", "computed".

    Example:
        >>> clear_memory_cache()
        >>> extractor = pooled_features(tiny_model, "avg")
        >>> x, y, classes, origin = split_features(extractor, weights_digest(tiny_model), digits_test, pooling="avg")
        >>> x.shape, classes, origin
        ((360, 48), 10, 'computed')
        >>> split_features(extractor, weights_digest(tiny_model), digits_test, pooling="avg")[3]
        'memory'
    """
    loaded, identity = load_split(source, split, data_dir)
    image_size = tuple(extractor.input_shape[1:3]) if image_size is None else tuple(image_size)
    key = cache_key(model_digest, identity, pooling, image_size)
    if key in _memory:
        _memory.move_to_end(key)
        features, labels = _memory[key]
        return features, labels, loaded.num_classes, "memory"
    path = None if cache_dir is None else _cache_path(os.fspath(cache_dir), key, pooling)
    stored = None if path is None else _read_cache(path, key)
    if stored is not None:
        features, labels = stored
        origin = "disk"
    else:
        features, labels = compute_features(extractor, loaded, image_size, batch_size)
        origin = "computed"
        if not len(labels):
            raise ValueError(f"The {role} split {loaded.name} has no examples; pass a split with images (tfds "
                             "slicing such as 'train[:90%]' must leave some).")
        if path is not None:
            _write_cache(path, key, features, labels)
    _memory[key] = (features, labels)
    while len(_memory) > 1 and (len(_memory) > MEMORY_ENTRIES or sum(
            x.nbytes + y.nbytes for x, y in _memory.values()) > MEMORY_BYTES):
        _memory.popitem(last=False)
    return features, labels, loaded.num_classes, origin
