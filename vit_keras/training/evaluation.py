"""Evaluation: top-1/top-5 accuracy on a split and the paper's few-shot linear probe (§4.1 "Metrics")."""

from __future__ import annotations

import numpy as np

FEW_SHOTS = (1, 5, 10, 25)
FEATURE_LAYERS = ("pre_logits", "pool")


def topk_accuracy(scores, labels, ks=(1, 5)) -> dict:
    """Top-k accuracies of `scores` (N, K) against integer `labels` (N,), as `{"top1": .., "top5": ..}`.

    Example:
        >>> topk_accuracy(np.array([[0.1, 0.9], [0.8, 0.2]]), np.array([1, 1]), ks=(1, 2))
        {'top1': 0.5, 'top2': 1.0}
    """
    scores, labels = np.asarray(scores), np.asarray(labels).reshape(-1)
    order = np.argsort(-scores, axis=-1)
    return {f"top{k}": float(np.mean(np.any(order[:, : min(k, scores.shape[1])] == labels[:, None], axis=1)))
            for k in ks}


def mean_average_precision(scores, labels) -> float:
    """Exact mean average precision of multi-label `scores` (N, K) against multi-hot `labels` (N, K): for each
    class with at least one positive, the mean of the precision at the rank of each positive (ties ranked
    pessimistically: a positive tied with a negative counts below it), averaged over those classes.

    Example:
        >>> mean_average_precision(np.array([[0.9, 0.1], [0.8, 0.7], [0.2, 0.3]]),
        ...                        np.array([[1, 0], [0, 1], [1, 1]]))  # class 0: (1 + 2/3) / 2, class 1: 1
        0.9166666666666666
    """
    scores, labels = np.asarray(scores, np.float64), np.asarray(labels) > 0.5
    precisions = []
    for k in range(scores.shape[1]):
        positives = labels[:, k]
        if not positives.any():
            continue
        # Descending score; among equal scores negatives first, so ties never flatter the model.
        order = np.lexsort((positives, -scores[:, k]))
        hits = positives[order]
        ranks = np.flatnonzero(hits) + 1
        precisions.append(np.mean(np.arange(1, len(ranks) + 1) / ranks))
    if not precisions:
        raise ValueError("No class has a positive example in the labels: mean average precision is undefined.")
    return float(np.mean(precisions))


def inference_function(model):
    """`model`'s forward pass as a numpy-in, numpy-out function, compiled with XLA where that is faster here.

    XLA follows the hardware rule of `vit_keras.hardware.xla_pays` for the model's own dtype policy: on for
    float32 (7% faster on CPUs, where Keras' `predict` leaves it off) and on GPUs, off for bfloat16 on CPUs with
    native bfloat16 instructions. A model built under a distribution strategy keeps `predict_on_batch`.

    Example:
        >>> forward = inference_function(tiny_model)  # a 10-class ViT on 32x32 images
        >>> forward(images).shape
        (8, 10)
    """
    import tensorflow as tf

    from vit_keras import hardware

    if getattr(model, "_distribute_strategy", None) is not None:
        return model.predict_on_batch
    jit_compile, _ = hardware.xla_pays(hardware.default_kind(), model.dtype_policy.name)
    function = tf.function(lambda images: model(images, training=False), jit_compile=jit_compile,
                           reduce_retracing=True)
    return lambda images: function(tf.nest.map_structure(tf.convert_to_tensor, images)).numpy()


def predict_dataset(model, dataset, multi_hot: bool = False):
    """Run `model` over a batched `(images, labels)` dataset; returns (scores, integer labels) as numpy.

    One compiled function (see `inference_function`) keeps a steady pace on CPU where `model.predict`'s loop
    stalls on some batches. A short last batch is padded to the first batch's size, so it reuses the compiled
    program instead of compiling another; the padding rows are dropped. `multi_hot=True` keeps multi-label
    targets as (N, K) rows instead of class indices.

    Example:
        >>> from vit_keras.data import eval_pipeline
        >>> pipeline = eval_pipeline(digits_test.dataset, image_size=(32, 32), batch_size=64, num_classes=10)
        >>> scores, labels = predict_dataset(tiny_model, pipeline)
        >>> scores.shape, labels.shape
        ((360, 10), (360,))
    """
    forward = inference_function(model)
    scores, labels, full = [], [], None
    for images, batch_labels in dataset.as_numpy_iterator():
        count = len(batch_labels)
        full = full or count
        # NaFlex batches (dicts) vary in length anyway; an all-zero padding row would be an image of no patches.
        if count < full and not isinstance(images, dict):
            images = np.concatenate([images, np.zeros((full - count, *images.shape[1:]), images.dtype)])
        scores.append(np.asarray(forward(images), np.float32)[:count])
        labels.append(batch_labels.argmax(-1) if batch_labels.ndim == 2 and not multi_hot else batch_labels)
    return np.concatenate(scores), np.concatenate(labels)


def evaluate(model, source, split: str = "test", *, batch_size: int = 256, data_dir: str | None = None,
             max_patches: int | None = None) -> dict:
    """Top-1 and top-5 accuracy of `model` on a tfds split (or a `tf.data.Dataset` of (image, label), or your own
    images: a folder of class subfolders, a .csv / .jsonl file), with vit_jax's eval preprocessing (resize to the
    model's input size). A flexible (NaFlex) model needs `max_patches`: each image is fit to that many patches at
    its own aspect ratio (`naflex_eval_pipeline`).

    A model trained on your own images knows its class names (`local_data.model_labels`; a checkpoint loaded with
    `local_data.read_labels` + `attach_labels`): your images' labels are matched to them by name. A multi-label
    model or file is scored by mean average precision instead (`{"mAP": ..., "examples": ...}`).

    Example:
        >>> evaluate(tiny_model, digits_test)  # an untrained model: about chance
        {'top1': ..., 'top5': ..., 'examples': 360}
    """
    from vit_keras.naflex_data import flexible_patch_size
    from vit_keras.training import data
    from vit_keras.training.naflex_pipelines import naflex_eval_pipeline

    patch = flexible_patch_size(model)
    if (patch is None) != (max_patches is None):
        raise ValueError("A flexible (NaFlex) model is evaluated with max_patches (its patch budget per image), a "
                         f"model of fixed-size images without: the model is {'' if patch else 'not '}flexible, "
                         f"max_patches={max_patches!r}.")
    from vit_keras.training.local_data import model_labels, relabel

    labels_kept = model_labels(model) or {}
    loaded = relabel(source, labels_kept.get("class_names"), "test data") if isinstance(source, data.Split) else \
        data.load(source, split, data_dir=data_dir, class_names=labels_kept.get("class_names"))
    classes = int(model.output_shape[-1])
    data.check_labels(loaded, classes)
    multi_label = bool(labels_kept.get("multi_label") or loaded.multi_label)
    if multi_label and not loaded.multi_label:
        raise ValueError(f"The model is multi-label but {loaded.name} has one label per image: score it on a file "
                         "with a `labels` column (several classes per image).")
    if patch is not None:
        pipeline = naflex_eval_pipeline(loaded.dataset, patch_size=patch, max_num_patches=max_patches,
                                        batch_size=batch_size, num_classes=classes, cache=False)
    else:
        pipeline = data.eval_pipeline(loaded.dataset, image_size=tuple(model.input_shape[1:3]),
                                      batch_size=batch_size, num_classes=classes, cache=False)
    scores, labels = predict_dataset(model, pipeline, multi_hot=multi_label)
    if multi_label:
        return {"mAP": mean_average_precision(scores, labels), "examples": int(len(labels))}
    return {**topk_accuracy(scores, labels, ks=(1, 5)), "examples": int(len(labels))}


def feature_extractor(model):
    """The frozen representation the paper probes: the pooled token (or `pre_logits`) before the head.

    Example:
        >>> feature_extractor(tiny_model).output_shape  # hidden size 48
        (None, 48)
    """
    import keras

    names = {layer.name for layer in model.layers}
    for name in FEATURE_LAYERS:
        if name in names:
            return keras.Model(model.inputs, model.get_layer(name).output, name=f"{model.name}_features")
    if len(model.output_shape) == 2:
        return model
    raise ValueError("The model has no pooled output: build it with include_top=True or pooling='token'/'avg'.")


def fit_least_squares_probe(features, labels, num_classes: int, l2_reg: float = 1.0):
    """Closed-form ridge regression from features to {-1, 1}^K one-vs-rest targets (paper §4.1).

    Features are centred on the training mean (the bias) and the system is solved in whichever of the primal
    (D×D) or dual (N×N) forms is smaller. Returns `predict(features) -> class indices`.

    Example:
        >>> x = np.array([[0.0, 1.0], [1.0, 0.0]]); predict = fit_least_squares_probe(x, np.array([0, 1]), 2, 1e-3)
        >>> predict(x).tolist()
        [0, 1]
    """
    x = np.asarray(features, np.float64)
    mean = x.mean(axis=0, keepdims=True)
    x = x - mean
    targets = 2.0 * np.eye(num_classes)[np.asarray(labels)] - 1.0
    bias = targets.mean(axis=0, keepdims=True)
    n, d = x.shape
    if d <= n:
        weights = np.linalg.solve(x.T @ x + l2_reg * np.eye(d), x.T @ (targets - bias))
    else:
        weights = x.T @ np.linalg.solve(x @ x.T + l2_reg * np.eye(n), targets - bias)

    def predict(new_features):
        return np.argmax((np.asarray(new_features, np.float64) - mean) @ weights + bias, axis=1)

    return predict


def few_shot_accuracy(train_features, train_labels, test_features, test_labels, num_classes: int,
                      shots=FEW_SHOTS, l2_reg: float = 1.0, seed: int = 0) -> dict:
    """The paper's few-shot metric on precomputed features: for each k, k random training examples per
    class, a least-squares probe, accuracy on the test features. Returns `{"1shot": .., "5shot": .., ...}`.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> y_train, y_test = np.arange(250) % 10, np.arange(100) % 10
        >>> f_train = np.eye(10)[y_train] + rng.normal(0, 0.1, (250, 10))  # features that separate the classes
        >>> f_test = np.eye(10)[y_test] + rng.normal(0, 0.1, (100, 10))
        >>> few_shot_accuracy(f_train, y_train, f_test, y_test, num_classes=10)
        {'1shot': 1.0, '5shot': 1.0, '10shot': 1.0, '25shot': 1.0}
    """
    rng = np.random.default_rng(seed)
    train_labels = np.asarray(train_labels)
    results = {}
    for k in shots:
        picked = []
        for label in range(num_classes):
            candidates = np.flatnonzero(train_labels == label)
            if len(candidates) < k:
                raise ValueError(f"Class {label} has {len(candidates)} training examples, fewer than {k} shots.")
            picked.append(rng.choice(candidates, size=k, replace=False))
        picked = np.concatenate(picked)
        predict = fit_least_squares_probe(train_features[picked], train_labels[picked], num_classes, l2_reg)
        results[f"{k}shot"] = float(np.mean(predict(test_features) == np.asarray(test_labels)))
    return results


def few_shot_probe(model, train_source, test_source, *, train_split: str = "train", test_split: str = "test",
                   shots=FEW_SHOTS, l2_reg: float = 1.0, seed: int = 0, batch_size: int = 256,
                   data_dir: str | None = None, max_train_examples: int | None = 50_000) -> dict:
    """Few-shot linear-probe accuracy of `model`'s frozen features, k ∈ `shots`, on tfds splits or datasets.

    Example:
        >>> few_shot_probe(tiny_model, digits, digits_test)  # an untrained model's features
        {'1shot': ..., '5shot': ..., '10shot': ..., '25shot': ...}
    """
    from vit_keras.training import data

    extractor = feature_extractor(model)
    size = tuple(model.input_shape[1:3])

    def features(source, split, limit):
        loaded = source if isinstance(source, data.Split) else data.load(source, split, data_dir=data_dir)
        if loaded.num_classes is None:
            raise ValueError("Pass a tfds name or a data.Split with num_classes for the few-shot probe.")
        pipeline = data.eval_pipeline(loaded.dataset.take(limit) if limit else loaded.dataset, image_size=size,
                                      batch_size=batch_size, num_classes=loaded.num_classes, cache=False)
        feats, labels = predict_dataset(extractor, pipeline)
        return feats, labels, loaded.num_classes

    train_x, train_y, classes = features(train_source, train_split, max_train_examples)
    test_x, test_y, _ = features(test_source, test_split, None)
    return few_shot_accuracy(train_x, train_y, test_x, test_y, classes, shots=shots, l2_reg=l2_reg, seed=seed)
