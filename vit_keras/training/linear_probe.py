"""The linear probe of a frozen backbone, as DINOv2 evaluates one: features computed once per split and cached,
a softmax logistic regression trained with Keras on them, its L2 strength and learning rate chosen on a validation
split carved from train by seed, then top-1 accuracy on the test split.

The protocol, step by step:

1. Features: `probe_features.pooled_features(model, pooling)` for every image of the train and test splits,
   resized to the model's input size by the eval pipeline (no augmentation), computed once and cached
   (`probe_features.split_features`: in memory, and under `cache_dir` when given).
2. Validation: `validation_fraction` of the train features, picked by a permutation seeded with `seed`.
3. Sweep: for each learning rate, one Keras `fit` trains one classifier per L2 strength side by side (DINOv2 trains
   its grid of linear heads together the same way): standardised features (mean and variance of the fitting
   examples), a linear layer from zero, loss `mean cross-entropy + l2 · ||W||²` (the bias is not penalised), Adam
   with a cosine decay to 0 over `epochs`. The classifier of best validation top-1 wins (ties: the stronger L2,
   then the smaller learning rate).
4. Final head: with `refit=True` the chosen setting is trained again on all of train (validation included), as
   scikit-learn's `LogisticRegressionCV` refits; it is scored once on the test split.

`l2` is scikit-learn's `1 / (2 · C · n)` for `n` fitting examples: `LogisticRegression(C=1 / (2 · l2 · n))` on the
same standardised features minimises the same objective (tests/test_linear_probe.py compares the two).

Example:
    >>> result = linear_probe(tiny_model, digits, digits_test, pooling="avg", l2_values=(1e-3,),
    ...                       learning_rates=(0.1,), epochs=20)
    >>> result["top1"] > 0.5, result["feature_dim"], result["examples"]
    (True, 48, {'train': 1437, 'validation': 144, 'test': 360})
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np

from vit_keras.training import probe_features

L2_VALUES = (0.0, 1e-5, 1e-4, 1e-3, 1e-2)
# Adam on standardised features: 0.1 reaches scikit-learn's optimum within 100 epochs of batch 256 on the digits
# (test predictions 98-99% the same), 0.01 is the slower, safer alternative the sweep may prefer.
LEARNING_RATES = (0.1, 0.01)
EPOCHS = 100
BATCH_SIZE = 256
VALIDATION_FRACTION = 0.1
# Features whose variance over the fitting examples is below this are constant there: left unscaled (variance 1)
# rather than divided by ~0, which would blow up any test example that differs.
CONSTANT_VARIANCE = 1e-12
STEPS_PER_EXECUTION = 50
# Fewer validation examples than this choose the sweep's setting by chance more than by merit: said in a warning.
FEW_VALIDATION_EXAMPLES = 10


def _numbers(name: str, values, example, positive: bool) -> list[float]:
    """`values` (one number or several) as floats, each finite and >= 0 (> 0 when `positive`), or a ValueError."""
    values = [values] if np.ndim(values) == 0 else list(np.asarray(values, dtype=object).reshape(-1))
    bound = "> 0" if positive else ">= 0"
    problem = ValueError(f"{name}={values!r}: give one or more finite numbers {bound}, e.g. {example}.")
    try:
        numbers = [float(value) for value in values]
    except (TypeError, ValueError):
        raise problem from None
    if not numbers or any(not math.isfinite(v) or v < 0 or (positive and v == 0) for v in numbers):
        raise problem
    return numbers


def _check_arguments(l2_values, learning_rates, epochs, batch_size, validation_fraction) -> tuple[list, list]:
    l2_values = _numbers("l2_values", l2_values, L2_VALUES, positive=False)
    learning_rates = _numbers("learning_rates", learning_rates, LEARNING_RATES, positive=True)
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name}={value!r}: give a whole number >= 1.")
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction={validation_fraction!r}: give a fraction strictly between 0 and 1 "
                         f"(default {VALIDATION_FRACTION}).")
    return l2_values, learning_rates


def carve_validation(count: int, fraction: float = VALIDATION_FRACTION, seed: int = 0):
    """Indices `(fit, validation)` of `count` train examples: `round(fraction · count)` (at least 1) picked by a
    permutation seeded with `seed`, the rest to fit on; both sorted.

    Example:
        >>> fit, validation = carve_validation(10, 0.2, seed=0)
        >>> len(fit), len(validation), sorted([*fit, *validation]) == list(range(10))
        (8, 2, True)
    """
    if count < 2:
        raise ValueError(f"The probe needs at least 2 train examples (some to fit, some to validate on), got {count}.")
    size = min(count - 1, max(1, round(fraction * count)))
    order = np.random.default_rng(seed).permutation(count)
    return np.sort(order[size:]), np.sort(order[:size])


def class_names_of(source):
    """The class names of a probe source: a `data.Split`'s, or those of your own images (a folder of class
    subfolders, a `.csv` / `.jsonl` file; read from its listing, nothing decoded); None for a tfds name or a
    `tf.data.Dataset`, whose labels are class indices already.

    Example:
        >>> from vit_keras.training import local_data
        >>> local_data.write_colour_squares("shapes")
        >>> class_names_of("shapes"), class_names_of("vit_keras_digits")
        (('blue', 'red'), None)
    """
    from vit_keras.training import local_data

    if local_data.is_local_source(source):
        return local_data.read_examples(source)[1]
    names = getattr(source, "class_names", None)
    return None if names is None else tuple(names)


def labels_by_train_classes(labels, train_names, test_names, test_source):
    """Test `labels` (indices into `test_names`) as indices into `train_names`, the classes the probe is trained on:
    a test folder lacking a class numbers the others differently, and scoring its labels by its own order would
    compare the wrong classes. A test class the train data lacks is a `ValueError`.

    Example:
        >>> labels_by_train_classes(np.array([0, 1]), ("cat", "cow", "dog"), ("cat", "dog"), "test/").tolist()
        [0, 2]
    """
    labels = np.asarray(labels)
    if train_names is None or test_names is None or tuple(train_names) == tuple(test_names):
        return labels
    check_test_classes(train_names, test_names, test_source)
    position = {name: index for index, name in enumerate(train_names)}
    return np.asarray([position[name] for name in test_names], labels.dtype)[labels]


def check_test_classes(train_names, test_names, test_source) -> None:
    """A `ValueError` when the test data has a class the train data lacks (checked before any feature is computed).

    Example:
        >>> check_test_classes(("cat", "dog"), ("dog",), "test/")
    """
    unknown = [name for name in test_names or () if train_names is not None and name not in train_names]
    if unknown:
        raise ValueError(f"The test data {test_source!r} has the class(es) {unknown}, which the train data lacks "
                         f"(its classes: {list(train_names)[:20]}); probe on test data of the train data's classes.")


def _refuse_testing_on_training_images(train_source, train_split, test_source, test_split) -> None:
    """A folder or file of your own images is one split: the same one with the same (or a whole) split on both
    sides would score the probe on the images it was trained on."""
    import os

    from vit_keras.training import local_data

    if not (local_data.is_local_source(train_source) and local_data.is_local_source(test_source)):
        return
    if os.path.realpath(os.fspath(train_source)) != os.path.realpath(os.fspath(test_source)):
        return
    if train_split == test_split or "[" not in train_split or "[" not in test_split:
        raise ValueError(f"The train and test data are both {os.fspath(test_source)!r} with the splits "
                         f"{train_split!r} and {test_split!r}: the probe would be scored on the images it is "
                         "trained on. A folder or file is one split: cut it in two (train_split='train[:80%]', "
                         "test_split='train[80%:]'), or pass a separate test folder.")


def _moments(features):
    mean = features.mean(axis=0)
    variance = features.var(axis=0)
    return mean, np.where(variance < CONSTANT_VARIANCE, 1.0, variance)


def fit_linear_heads(features, labels, num_classes: int, l2_values, *, learning_rate: float, epochs: int = EPOCHS,
                     batch_size: int = BATCH_SIZE, seed: int = 0):
    """Train one softmax classifier per L2 strength on `features`, side by side in one Keras model.

    Each classifier minimises its own `mean cross-entropy + l2 · ||W||²` on standardised features (their mean and
    variance here); Adam treats each weight on its own, so training them together is training each alone. Returns
    the Keras model: `(N, D)` features in, `(N, len(l2_values), num_classes)` logits out.

    Example:
        >>> x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32"); y = (x[:, 0] > 0).astype(int)
        >>> heads = fit_linear_heads(x, y, 2, [0.0, 1.0], learning_rate=0.05, epochs=30)
        >>> scores = heads.predict(x, verbose=0)
        >>> scores.shape, bool((scores[:, 0].argmax(-1) == y).mean() > 0.9)
        ((64, 2, 2), True)
    """
    import keras
    import tensorflow as tf

    features = np.asarray(features, np.float32)
    labels = np.asarray(labels, np.int64)
    heads = len(l2_values)
    mean, variance = _moments(features)
    # The loss below averages over the heads too, so each head's penalty is divided by their count alike.
    strengths = np.asarray(l2_values, np.float32)[None, :, None] / heads

    def per_head_l2(kernel):
        return keras.ops.sum(keras.ops.convert_to_tensor(strengths) * keras.ops.square(kernel))

    inputs = keras.Input((features.shape[1],), name="features")
    standardised = keras.layers.Normalization(mean=mean, variance=variance, name="probe_standardize")(inputs)
    logits = keras.layers.EinsumDense("nd,dgc->ngc", output_shape=(heads, num_classes), bias_axes="gc",
                                      kernel_initializer="zeros", kernel_regularizer=per_head_l2,
                                      name="probe_heads")(standardised)
    model = keras.Model(inputs, logits, name="linear_probe_sweep")
    steps_per_epoch = math.ceil(len(labels) / batch_size)
    steps = epochs * steps_per_epoch
    # Several steps per call of the compiled function: a linear head's step is shorter than Keras' per-call work.
    model.compile(optimizer=keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(learning_rate, steps)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=min(steps, STEPS_PER_EXECUTION))
    targets = np.repeat(labels[:, None], heads, axis=1)  # every head learns the same labels
    # All epochs as one pass of a repeated dataset: Keras' per-epoch set-up costs more than a small head's steps.
    dataset = (tf.data.Dataset.from_tensor_slices((features, targets))
               .shuffle(len(labels), seed=seed, reshuffle_each_iteration=True).batch(batch_size).repeat(epochs))
    model.fit(dataset, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0)
    return model


def _accuracies(heads, features, labels) -> np.ndarray:
    logits = heads.predict(np.asarray(features, np.float32), batch_size=4096, verbose=0)
    return (logits.argmax(-1) == np.asarray(labels)[:, None]).mean(axis=0)


def _head_model(heads, index: int):
    """The classifier `index` of a `fit_linear_heads` model as a plain Keras head: standardise, Dense, softmax."""
    import keras

    norm = heads.get_layer("probe_standardize")
    kernel, bias = heads.get_layer("probe_heads").get_weights()
    dim, classes = kernel.shape[0], kernel.shape[-1]
    head = keras.Sequential([
        keras.Input((dim,), name="features"),
        keras.layers.Normalization(mean=np.asarray(norm.mean).reshape(-1), variance=np.asarray(norm.variance)
                                   .reshape(-1), name="probe_standardize"),
        keras.layers.Dense(classes, activation="softmax", name="probe_head"),
    ], name="linear_probe")
    head.get_layer("probe_head").set_weights([kernel[:, index], bias[index]])
    return head


def probe_model(backbone, head, pooling: str = "token+avg"):
    """`backbone`'s probe features (`pooling`, as the head was trained on) followed by `head`: a Keras model from
    images to class probabilities, to predict with, save as `.keras` or export.

    Example:
        >>> result, head = linear_probe(tiny_model, digits, digits_test, pooling="avg", l2_values=(1e-3,),
        ...                             learning_rates=(0.1,), epochs=20, return_head=True)
        >>> classifier = probe_model(tiny_model, head, pooling="avg")
        >>> classifier(images).shape
        TensorShape([8, 10])
    """
    import keras

    extractor = probe_features.pooled_features(backbone, pooling)
    width, expected = int(extractor.output_shape[-1]), head.input_shape[-1]
    if expected is not None and int(expected) != width:
        raise ValueError(f"The head takes {expected} features, and {backbone.name!r} gives {width} with "
                         f"pooling={pooling!r}: pass the pooling (and backbone) the head was trained with.")
    return keras.Model(extractor.input, head(extractor.output), name=f"{backbone.name}_linear_probe")


def linear_probe(model, train_source, test_source, *, train_split: str = "train", test_split: str = "test",
                 pooling: str = "token+avg", cache_dir=None, l2_values=L2_VALUES, learning_rates=LEARNING_RATES,
                 epochs: int = EPOCHS, batch_size: int = BATCH_SIZE, feature_batch_size: int = 256,
                 validation_fraction: float = VALIDATION_FRACTION, refit: bool = True, seed: int = 0,
                 data_dir: str | None = None, image_size=None, return_head: bool = False):
    """Linear-probe top-1 accuracy of `model`'s frozen features (the module's protocol).

    Args:
        model: the frozen backbone (any vit_keras model; its head, if any, is ignored unless `pooling="model"`).
        train_source, test_source: tfds names (`"vit_keras_digits"`), your own images (a folder of class
            subfolders, a `.csv` / `.jsonl` file; a test folder may lack classes, its labels are matched to the
            train data's classes by name), `data.Split`s or `tf.data.Dataset`s of `(image, label)`;
            `train_split` / `test_split` pick a tfds name's splits, or slice a folder ("train[:80%]").
        pooling: `"token"`, `"avg"`, `"token+avg"` (DINOv2's) or `"model"` (`probe_features.pooled_features`).
        cache_dir: keep the features there too (`.npz`, keyed by weights, data, pooling and image size).
        l2_values, learning_rates: the sweep; `epochs`, `batch_size`: each classifier's training.
        feature_batch_size: images per forward pass of the backbone.
        validation_fraction, seed: the validation examples carved from train to choose the setting.
        refit: train the chosen setting again on all of train before the test (else keep the sweep's classifier).
        image_size: the size images are resized to (default: the model's input size).
        return_head: also return the trained head (features in, probabilities out), for `probe_model`.

    Returns a dict: `top1` (test), `validation_top1`, the chosen `l2` and `learning_rate`, the `sweep` (every
    setting's validation top-1), `pooling`, `feature_dim`, `classes`, `examples` per split, where each split's
    features came from (`features`: "computed", "memory" or "disk") and the seconds spent on features and on the
    head; `(dict, head)` with `return_head=True`.

    Example:
        >>> linear_probe(tiny_model, digits, digits_test, pooling="median")
        Traceback (most recent call last):
        ValueError: pooling='median' is not a probe pooling; use one of ('model', 'token', 'avg', 'token+avg'): ...
    """
    l2_values, learning_rates = _check_arguments(l2_values, learning_rates, epochs, batch_size, validation_fraction)
    _refuse_testing_on_training_images(train_source, train_split, test_source, test_split)
    train_names, test_names = class_names_of(train_source), class_names_of(test_source)
    check_test_classes(train_names, test_names, test_source)
    started = time.perf_counter()
    extractor = probe_features.pooled_features(model, pooling)
    size = tuple(extractor.input_shape[1:3]) if image_size is None else tuple(image_size)
    if len(size) != 2 or any(side is None for side in size):
        raise ValueError(f"{model.name!r} takes images of any size: pass image_size=(height, width) for the probe.")
    digest = probe_features.weights_digest(model)
    options = dict(pooling=pooling, cache_dir=cache_dir, batch_size=feature_batch_size, data_dir=data_dir,
                   image_size=size)
    train_x, train_y, train_classes, train_origin = probe_features.split_features(
        extractor, digest, train_source, train_split, role="train", **options)
    test_x, test_y, _, test_origin = probe_features.split_features(extractor, digest, test_source, test_split,
                                                                   role="test", **options)
    feature_seconds = time.perf_counter() - started

    started = time.perf_counter()
    test_y = labels_by_train_classes(test_y, train_names, test_names, test_source)
    classes = int(train_classes or train_y.max() + 1)
    if test_y.max() >= classes or min(train_y.min(), test_y.min()) < 0:
        raise ValueError(f"The test labels reach {int(test_y.max())}, beyond the {classes} classes of the train "
                         "split: probe a test split of the same classes.")
    fit, validation = carve_validation(len(train_y), validation_fraction, seed)
    settings = len(l2_values) * len(learning_rates)
    if settings > 1 and len(validation) < FEW_VALIDATION_EXAMPLES:
        warnings.warn(f"The probe chooses among {settings} settings (L2 strength, learning rate) on "
                      f"{len(validation)} validation image(s) ({validation_fraction:.0%} of {len(train_y)} train "
                      "images): a choice that close to chance. Probe on more images, or fix the setting "
                      "(one l2 value and one learning rate).", stacklevel=2)
    sweep = []
    for learning_rate in learning_rates:
        heads = fit_linear_heads(train_x[fit], train_y[fit], classes, l2_values, learning_rate=learning_rate,
                                 epochs=epochs, batch_size=batch_size, seed=seed)
        accuracies = _accuracies(heads, train_x[validation], train_y[validation])
        sweep += [{"l2": l2, "learning_rate": learning_rate, "validation_top1": float(accuracy), "heads": heads,
                   "index": index} for index, (l2, accuracy) in enumerate(zip(l2_values, accuracies))]
    best = min(sweep, key=lambda entry: (-entry["validation_top1"], -entry["l2"], entry["learning_rate"]))
    if refit:
        final = fit_linear_heads(train_x, train_y, classes, [best["l2"]], learning_rate=best["learning_rate"],
                                 epochs=epochs, batch_size=batch_size, seed=seed)
        head = _head_model(final, 0)
    else:
        head = _head_model(best["heads"], best["index"])
    scores = head.predict(test_x, batch_size=4096, verbose=0)
    result = {
        "top1": float(np.mean(scores.argmax(-1) == test_y)),
        "validation_top1": best["validation_top1"],
        "l2": best["l2"],
        "learning_rate": best["learning_rate"],
        "sweep": [{key: entry[key] for key in ("l2", "learning_rate", "validation_top1")} for entry in sweep],
        "pooling": pooling,
        "feature_dim": int(train_x.shape[1]),
        "classes": classes,
        "examples": {"train": int(len(train_y)), "validation": int(len(validation)), "test": int(len(test_y))},
        "features": {"train": train_origin, "test": test_origin},
        "refit": bool(refit),
        "epochs": int(epochs),
        "seed": int(seed),
        "feature_seconds": round(feature_seconds, 3),
        "head_seconds": round(time.perf_counter() - started, 3),
    }
    return (result, head) if return_head else result
