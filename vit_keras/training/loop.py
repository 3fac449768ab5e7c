"""`train()`: build, compile and fit a ViT inside the chosen `tf.distribute` strategy, resumably."""

from __future__ import annotations

import dataclasses
import json
import logging
import os

import numpy as np

from vit_keras import quantization
from vit_keras.training import callbacks as cb
from vit_keras.training import data, local_data
from vit_keras.training.device_prefetch import choose_input_path
from vit_keras.training.lora import lora as enable_lora
from vit_keras.training.lora import restart_adapters
from vit_keras.training.optim import make_optimizer
from vit_keras.training.run import RunDirectories, run_directory, run_settings
from vit_keras.training.strategy import (
    plan_execution,
    prepare_keras_fit,
    select_strategy,
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class TrainResult:
    """What a run produced: the trained model, per-epoch history, final metrics and where files went.

    Example:
        >>> [field.name for field in dataclasses.fields(TrainResult)]  # `train` returns one; see its example
        ['model', 'history', 'metrics', 'updates', 'output_dir', 'plan', 'input_path', 'lora']
    """

    model: object
    history: dict
    metrics: dict
    updates: int
    output_dir: str
    plan: object
    input_path: str = ""  # how the training batches reached the step (`device_prefetch.choose_input_path`)
    lora: dict | None = None  # a LoRA run's rank, targets, alpha and trainable count (`lora_report`)


def _patch_size(model) -> int | None:
    names = {layer.name for layer in model.layers}
    return model.get_layer("patches").patch_size if "patches" in names else None


def _check_flexible(model, config, patch: int | None) -> None:
    if config.max_patches is None:
        raise ValueError(
            "The model is flexible (NaFlex): it takes patches of images of any aspect ratio, not images of one "
            "size. Set config.max_patches (patches per image, e.g. 256; vit-keras train --max-patches 256), or "
            "build the model without flexible=True."
        )
    if patch is None:
        raise ValueError(
            f"config.max_patches={config.max_patches} trains a flexible (NaFlex) model on images of their own aspect "
            "ratio, but this model takes images of one size: build it with flexible=True (vit_keras.ViT(..., "
            "flexible=True) or from_pretrained(..., flexible=True)), or set max_patches=None to train at a fixed "
            "image_size."
        )
    features = int(model.input["patches"].shape[-1])
    if features != patch * patch * 3:
        raise ValueError(f"The flexible model takes patches of {features} values, not the {patch}x{patch}x3 RGB "
                         "patches the training data gives: build it with channels=3.")


def _model_pipelines(model, config, classes: int):
    """The input pipelines `model` takes (checked against `config`): NaFlex patches for a flexible model, else
    images of the model's fixed size."""
    from vit_keras.naflex_data import flexible_patch_size

    patch = flexible_patch_size(model)
    if config.max_patches is not None or patch is not None:
        _check_flexible(model, config, patch)
        return _NaflexPipelines(config, patch, classes)
    return _ImagePipelines(config, _check_model(model, config), classes)


def _check_model(model, config) -> tuple[int, int]:
    height, width = model.input_shape[1:3]
    if height is None or width is None:
        raise ValueError(f"Model {model.name!r} takes images of any size; build it with a fixed image_size "
                         "(vit_keras.from_pretrained(source, any_image_size=False) keeps the checkpoint's own size, "
                         "image_size=(height, width) picks one): XLA and the input pipeline need static shapes.")
    if config.image_size is not None:
        wanted = data._as_hw(config.image_size)
        if wanted != (height, width):
            raise ValueError(
                f"config.image_size {wanted} differs from the model's input {(height, width)}: build the model at "
                "the training resolution (transfer_weights resamples the position embeddings)."
            )
    patch = _patch_size(model)
    if patch and (height % patch or width % patch):
        raise ValueError(f"Image size {(height, width)} is not divisible by the patch size {patch}.")
    return height, width


def _check_dropout(model, config) -> None:
    # The rates are fixed when the layers are built, so train() cannot apply the recipe's dropout itself: a model
    # built with other rates would silently train another recipe (pretrain()'s 0.1 with none at all).
    from vit_keras.layers.transformer import TransformerBlock

    wanted = {"dropout_rate": float(config.dropout_rate),
              "attention_dropout_rate": float(config.attention_dropout_rate)}
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if not isinstance(layer, TransformerBlock):
            continue
        built = {name: float(getattr(layer.block, name)) for name in wanted}  # the block's BlockConfig
        if any(abs(built[name] - wanted[name]) > 1e-9 for name in wanted):
            raise ValueError(
                f"The model's {layer.name} was built with {built}, but the config asks for {wanted}: dropout is "
                "fixed when the model is built, so build it with dropout_rate=config.dropout_rate, "
                "attention_dropout_rate=config.attention_dropout_rate (or set those config fields to the model's)."
            )


def lora_report(model) -> dict | None:
    """What a LoRA run trains, for its log, `results.json` and TensorBoard: `{"rank", "targets", "alpha",
    "trainable_parameters", "parameters"}` (the adapters and head against every weight, adapters included); None
    for a model without adapters.

    Example:
        >>> from vit_keras.training import lora
        >>> report = lora_report(lora(tiny_model, rank=2))
        >>> report["rank"], report["targets"], report["trainable_parameters"] < report["parameters"]
        (2, 'qv', True)
    """
    from vit_keras.training.lora import lora_settings

    settings = lora_settings(model)
    if settings is None:
        return None

    def count(variables):
        return int(sum(np.prod(variable.shape) for variable in variables))

    return {**settings, "trainable_parameters": count(model.trainable_weights), "parameters": count(model.weights)}


def _refuse_output_inside_data(output_dir, *sources) -> None:
    """A run writes logs/, checkpoints/ and backup/ into `output_dir`: inside a folder of class subfolders they
    would be read as classes (of checkpoint files) by the next run on it."""
    out = os.path.realpath(os.fspath(output_dir))
    for source in sources:
        if not isinstance(source, str) or not os.path.isdir(source):
            continue
        folder = os.path.realpath(source)
        if out == folder or out.startswith(folder.rstrip(os.sep) + os.sep):
            raise ValueError(f"The output directory {os.fspath(output_dir)!r} is inside the image folder {source!r}: "
                             "its logs/, checkpoints/ and backup/ would become classes of the next run on that "
                             "folder. Write the run elsewhere, e.g. --output-dir runs/NAME beside the folder.")


def _outputs_probabilities(model) -> bool:
    last = model.layers[-1]
    return last.name == "predictions" and getattr(last, "activation", None) is not None and \
        getattr(last.activation, "__name__", "") != "linear"


def _as_split(source, split, data_dir, num_classes, class_names=None):
    if isinstance(source, data.Split):  # validation data numbered by its own classes: by the training's instead
        return local_data.relabel(source, class_names, "validation data")
    return data.load(source, split, data_dir=data_dir, num_classes=num_classes, class_names=class_names)


def _loss_and_metrics(multi_label: bool, classes: int, from_logits: bool, label_smoothing: float):
    """(loss, metrics, the metric that picks best.keras): softmax cross-entropy and accuracy, or for multi-label
    data (several classes per image) sigmoid binary cross-entropy and mean average precision ("map": the mean over
    classes of the area under each precision-recall curve)."""
    import keras

    if multi_label:
        return (keras.losses.BinaryCrossentropy(from_logits=from_logits, label_smoothing=label_smoothing),
                [keras.metrics.AUC(curve="PR", multi_label=True, num_labels=classes, from_logits=from_logits,
                                   name="map")], "map")
    return (keras.losses.CategoricalCrossentropy(from_logits=from_logits, label_smoothing=label_smoothing),
            [keras.metrics.CategoricalAccuracy(name="accuracy"),
             keras.metrics.TopKCategoricalAccuracy(k=min(5, classes), name="top5_accuracy")], "accuracy")


def _segments(start: int, total: int, per_epoch: int):
    """[(first_epoch, last_epoch_exclusive, steps_per_epoch, start_step)], grouping equal-length epochs."""
    segments, step = [], start
    while step < total:
        epoch = step // per_epoch
        length = min((epoch + 1) * per_epoch, total) - step
        previous = segments[-1] if segments else None
        if previous and previous[2] == length and length == per_epoch and previous[1] == epoch:
            segments[-1] = (previous[0], epoch + 1, length, previous[3])
        else:
            segments.append((epoch, epoch + 1, length, step))
        step += length
    return segments


# The share of the training split held out for model selection when no validation split is named.
VALIDATION_FRACTION = 0.1


def holdout_splits(train_split: str, validation_fraction: float = VALIDATION_FRACTION) -> tuple[str, str]:
    """The tfds split strings that hold out the last `validation_fraction` of `train_split` for validation.

    Model selection (best checkpoint, early decisions) then never sees the test split, as the paper holds out
    part of the training data for its hyper-parameter choices. tfds stores examples shuffled, so the held-out
    slice is a random sample of the split, the same on every machine.

    Example:
        >>> holdout_splits("train", 0.1)
        ('train[:90%]', 'train[90%:]')
    """
    if not 0.0 < float(validation_fraction) < 1.0:
        raise ValueError(
            f"validation_fraction must lie in (0, 1), got {validation_fraction!r}: it is the share of the training "
            "split held out for validation (e.g. 0.1)."
        )
    if any(mark in train_split for mark in "[]+"):
        raise ValueError(
            f"Cannot hold out validation data from the composite split {train_split!r}: name the validation split "
            "yourself (validation_split='...', e.g. 'train[90%:]' beside train_split='train[:90%]')."
        )
    percent = f"{100.0 * (1.0 - float(validation_fraction)):.6g}"
    return f"{train_split}[:{percent}%]", f"{train_split}[{percent}%:]"


def _resolve_splits(train_data, validation_data, train_split, validation_split, validation_fraction):
    """(train split, validation split): a held-out slice of the training split unless a split is named."""
    from vit_keras.training.local_data import is_local_source

    if (is_local_source(validation_data) and validation_data == train_data and validation_split is not None
            and "[" not in validation_split):
        raise ValueError(
            f"validation_split={validation_split!r} of {validation_data!r} is all of its images, which also train: "
            "leave validation_split out (10% of the images are held out), slice both (train_split='train[:80%]', "
            "validation_split='train[80%:]'), or validate on a folder or file of its own."
        )
    if validation_data is None or validation_split is not None or not isinstance(validation_data, str):
        return train_split, validation_split
    if is_local_source(validation_data) and validation_data != train_data:
        return train_split, "all"  # a folder or file of its own: all of it validates
    if not isinstance(train_data, str) or train_data != validation_data:
        raise ValueError(
            f"validation_data={validation_data!r} without validation_split holds out part of the training split, "
            f"but the training data is {train_data!r}, not that dataset: pass validation_split (e.g. 'validation' "
            "or 'test') to validate on a split of it."
        )
    held_train, held_validation = holdout_splits(train_split, validation_fraction)
    logger.info("Validating on %s[%s], held out from the training split (%s for training).",
                validation_data, held_validation, held_train)
    return held_train, held_validation


@dataclasses.dataclass(frozen=True)
class ResumedRun:
    """Where a run stands: micro-steps per epoch and in all, the step to start from, its checkpoint callbacks."""

    micro_per_epoch: int
    total_micro: int
    start: int
    best_checkpoint: object
    last_checkpoint: object
    backup: object


def resume_run(model, config, checkpoint_dir: str, backup_dir: str, monitor: str, mode: str,
               deferred: bool = False) -> ResumedRun:
    """The best/last checkpoint callbacks and the step backup of a run, with `model` restored from the backup.

    `deferred`: the backup's per-step work runs at the next step's start (`callbacks.StepEndCallback`).

    Example:
        >>> from vit_keras.training import finetune
        >>> run = resume_run(tiny_model, finetune(), "out/checkpoints", "out/backup", "val_accuracy", "max")
        >>> run.start  # nothing backed up yet: from the first step
        0
    """
    micro_per_epoch = config.updates_per_epoch * config.accumulation_steps
    total_micro = config.total_steps * config.accumulation_steps
    best_checkpoint, last_checkpoint = cb.checkpoint_callbacks(checkpoint_dir, monitor, mode)
    backup = cb.StepBackup(backup_dir, every=config.backup_every or max(micro_per_epoch // 4, 1),
                           best_checkpoint=best_checkpoint, deferred=deferred)
    start = backup.restore(model)
    if start and restart_adapters(model):  # the backup holds the adapters' update folded into the kernels
        logger.warning("LoRA: the adapters' update so far is in the restored kernels; fresh adapters continue.")
    if start:
        logger.warning("Resuming from micro-step %d of %d (backup in %s).", start, total_micro, backup_dir)
    return ResumedRun(micro_per_epoch, total_micro, start, best_checkpoint, last_checkpoint, backup)


def fit_segments(model, make_train_dataset, start: int, total: int, per_epoch: int, validation_dataset, callbacks,
                 verbose) -> dict:
    """Run `model.fit` from micro-step `start` to `total`, one call per `_segments` piece, and merge the histories.

    `make_train_dataset(start_step)` returns the training data positioned at `start_step`, so a resumed run sees
    exactly the batches an uninterrupted one would.

    Example:
        >>> import tensorflow as tf
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(10)])  # any compiled Keras model
        >>> model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        >>> examples = tf.data.Dataset.from_tensor_slices((np.ones((8, 4), "float32"), np.arange(8) % 10))
        >>> make_dataset = lambda start_step: examples.repeat().skip(start_step * 4).batch(4)  # from that step
        >>> history = fit_segments(model, make_dataset, 0, 4, 2, None, [], 0)  # 4 steps in epochs of 2
        >>> len(history["loss"])
        2
    """
    history: dict = {}
    for first_epoch, end_epoch, steps, start_step in _segments(start, total, per_epoch):
        fitted = model.fit(
            make_train_dataset(start_step), initial_epoch=first_epoch, epochs=end_epoch, steps_per_epoch=steps,
            validation_data=validation_dataset, callbacks=callbacks, verbose=verbose, shuffle=False,
        )
        for key, values in fitted.history.items():
            history.setdefault(key, []).extend(values)
    return history


def write_text(path: str, text: str) -> None:
    """Write `text` to `path` atomically (temporary name, then rename); remote paths go through tf.io.gfile.

    Example:
        >>> write_text("run/results.json", "{}")
        >>> open("run/results.json").read()
        '{}'
    """
    import tensorflow as tf

    if "://" in path:  # object stores show an object only once its upload completes
        with tf.io.gfile.GFile(path, "w") as handle:
            handle.write(text)
        return
    from vit_keras.files import atomic_file

    with atomic_file(path) as tmp, open(tmp, "w") as handle:
        handle.write(text)


def execution_plan(config, strategy=None, tpu=None):
    """The `tf.distribute` strategy and the precision/XLA plan a run uses, checked against `config`'s batch.

    Shared by `train` and `masked_patch_pretrain`: the strategy given (or the one `select_strategy` picks), the plan
    `plan_execution` makes for the hardware (XLA off when `config.deterministic`), and a `ValueError` when a step's
    micro-batch does not split over the replicas.

    Example:
        >>> from vit_keras.training import finetune
        >>> strategy, plan = execution_plan(finetune(batch_size=64, precision="float32"))
        >>> plan.policy
        'float32'
    """
    strategy = strategy or select_strategy(tpu=tpu)
    plan = plan_execution(strategy, config.precision, config.jit_compile)
    if config.deterministic and plan.jit_compile:
        # TensorFlow's op determinism does not cover every XLA kernel (Keras drops XLA for the same reason).
        plan = dataclasses.replace(plan, jit_compile=False, notes=(*plan.notes, "XLA off: deterministic ops"))
    replicas = strategy.num_replicas_in_sync
    if config.micro_batch_size % replicas:
        raise ValueError(
            f"The batch of {config.micro_batch_size} examples per step (batch_size {config.batch_size} / "
            f"accumulation_steps {config.accumulation_steps}) is not divisible by the {replicas} replicas; "
            f"use a batch size that is a multiple of {replicas * config.accumulation_steps}."
        )
    return strategy, plan


def train(build_model, train_data, config, *, output_dir: str, validation_data=None, train_split: str = "train",
          validation_split: str | None = None, validation_fraction: float = VALIDATION_FRACTION,
          data_dir: str | None = None, strategy=None, tpu: str | None = None, num_classes: int | None = None,
          verbose="auto", callbacks=(), distribution=None, lora_rank: int | None = None,
          lora_targets: str | None = None, device_prefetch: bool | None = None,
          quantize_aware: bool = False) -> TrainResult:
    """Train the model `build_model()` returns on `train_data` with `config` (see `finetune` / `pretrain`).

    `build_model` is called inside the strategy's scope under the chosen dtype policy, so its variables land on
    every replica (load or `transfer_weights` pretrained weights inside it). `train_data` /
    `validation_data` are tfds names (with `train_split` / `validation_split` / `data_dir`), `data.Split`s, or
    `tf.data.Dataset`s of (image, label) (then pass `num_classes`). Everything is checked before the first step:
    dataset and split names, labels against the head, batch size against replicas and accumulation, image size
    against the patch size, and the model's dropout against the config: dropout is part of the model, so build
    it with `dropout_rate=config.dropout_rate, attention_dropout_rate=config.attention_dropout_rate` (a
    `ValueError` says so otherwise; `pretrain()` asks for 0.1).

    `accumulation_steps` works on one device and under every `tf.distribute` strategy: k micro-batches of b
    train exactly as one batch of k·b. On the JAX backend, `distribution` (a `keras.distribution` such as
    `training.parallel.data_parallel()` or `model_parallel(...)`) spreads the run over local devices instead;
    TensorBoard and the tf.data input need TensorFlow installed on every backend.

    A flexible (NaFlex) model (`vit_keras.ViT(..., flexible=True)`) trains with `config.max_patches`: each image
    at its own aspect ratio fit to that many patches, batches padded and masked
    (`naflex_pipelines.naflex_train_pipeline`; `config.naflex_buckets` pads each batch only to its bucket's length).

    `output_dir` receives `logs/` (TensorBoard), `checkpoints/best.keras` and `last.keras`, `backup/` (emptied
    when the run completes) and `results.json`. Running the same call again after an interruption resumes at
    the last backed-up step. `callbacks` are further Keras callbacks, run after the run's own. Returns a
    `TrainResult`. `lora_rank` fine-tunes LoRA adapters of that rank on `lora_targets` (`training.lora`; default
    "qv") and the head only, every other weight frozen; the checkpoints hold the update folded into plain kernels.
    `output_dir` may not be a folder of images being trained on, nor inside one (its folders would become
    classes on the next run).

    `device_prefetch` (None: from the hardware) keeps the next training batch on the accelerator while the current
    step runs where the backend does not already (`training.device_prefetch`): False keeps the plain path. The
    path taken is logged, returned as `TrainResult.input_path` and saved in `results.json` ("input").

    `quantize_aware=True` fine-tunes the model `build_model()` returns (load the float checkpoint inside it) with
    its matmuls fake-quantized to int8 (`vit_keras.quantization.quantize_aware`); the checkpoints and the
    returned model are the quantization-aware model, which `vit_keras.export.tflite(model, path,
    quantization="int8")` writes without a representative dataset.

    Example:
        >>> from vit_keras.training import pretrain, train
        >>> config = pretrain(total_steps=2, batch_size=16)  # a short run
        >>> build = lambda: vit_keras.ViT(image_size=16, patch_size=4, hidden_size=48, num_layers=2,
        ...                               num_heads=3, mlp_dim=96, classes=10, dropout_rate=config.dropout_rate,
        ...                               attention_dropout_rate=config.attention_dropout_rate)
        >>> result = train(build, digits, config, output_dir="run", verbose=0)  # validation_data=...: validates too
        >>> result.updates, sorted(result.metrics)[:2], sorted(os.listdir("run"))
        (2, ['accuracy', 'loss'], ['backup', 'checkpoints', 'logs', 'results.json'])
    """
    import keras

    if lora_targets is not None and lora_rank is None:
        raise ValueError(f"lora_targets={lora_targets!r} applies to LoRA, and no lora_rank is given: the whole model "
                         "would train. Pass lora_rank (on the command line --lora RANK), or drop lora_targets.")
    # A pathlib.Path to your own images is the same source as its string (the holdout compares them).
    train_data, validation_data = (os.fspath(source) if isinstance(source, os.PathLike) else source
                                   for source in (train_data, validation_data))
    _refuse_output_inside_data(output_dir, train_data, validation_data)
    train_split, validation_split = _resolve_splits(train_data, validation_data, train_split, validation_split,
                                                    validation_fraction)
    if distribution is not None:
        if keras.backend.backend() != "jax" or strategy is not None or tpu is not None:
            raise ValueError(
                "`distribution` (keras.distribution) needs KERAS_BACKEND=jax and no `strategy`/`tpu`; on "
                f"TensorFlow (backend now {keras.backend.backend()!r}) pass a tf.distribute `strategy` instead."
            )
        with distribution.scope():
            return train(build_model, train_data, config, output_dir=output_dir, validation_data=validation_data,
                         train_split=train_split, validation_split=validation_split,
                         validation_fraction=validation_fraction, data_dir=data_dir, num_classes=num_classes,
                         verbose=verbose, callbacks=callbacks, lora_rank=lora_rank, lora_targets=lora_targets,
                         device_prefetch=device_prefetch, quantize_aware=quantize_aware)
    if quantize_aware and lora_rank is not None:
        raise ValueError("quantize_aware=True and lora_rank fine-tune different weights (all kernels under int8 "
                         "rounding, or LoRA adapters of frozen ones); choose one.")
    strategy, plan = execution_plan(config, strategy, tpu)
    with run_directory(output_dir, strategy):
        train_split_data = _as_split(train_data, train_split, data_dir, num_classes)
        validation = None if validation_data is None else _as_split(validation_data, validation_split, data_dir,
                                                                     num_classes or train_split_data.num_classes,
                                                                     train_split_data.class_names)

        with run_settings(config, plan):
            with strategy.scope():
                model = build_model()
                if lora_rank is not None:
                    enable_lora(model, rank=lora_rank, targets=lora_targets or "qv")
                from_logits = not _outputs_probabilities(model)  # read from the float model's own output layer
                if quantize_aware:
                    model = quantization.quantize_aware(model)
            lora = lora_report(model)
            if lora is not None:
                logger.info("LoRA: rank %d on %s (alpha %g): %s of %s weights train (adapters and head).",
                            lora["rank"], lora["targets"], lora["alpha"], f"{lora['trainable_parameters']:,}",
                            f"{lora['parameters']:,}")
            classes = int(model.output_shape[-1])
            pipelines = _model_pipelines(model, config, classes)
            _check_dropout(model, config)
            data.check_labels(train_split_data, classes)
            if validation is not None:
                data.check_labels(validation, classes)

            loss, metrics, metric = _loss_and_metrics(train_split_data.multi_label, classes, from_logits,
                                                      config.label_smoothing)
            # Your own images: the class names go into every checkpoint (local_data.LABELS_ENTRY).
            local_data.attach_labels(model, local_data.label_metadata(train_split_data))
            with strategy.scope():
                model.compile(optimizer=make_optimizer(config), loss=loss, metrics=metrics,
                              jit_compile=plan.jit_compile)
            return _fit(model, strategy, plan, config, train_split_data, validation, classes, pipelines,
                        output_dir, verbose, list(callbacks), metric, device_prefetch, lora)


@dataclasses.dataclass(frozen=True)
class _ImagePipelines:
    """The input of a model of fixed-size images: `data.train_pipeline` / `data.eval_pipeline`."""

    config: object
    size: tuple
    classes: int

    def train(self, dataset, skip_steps: int, input_context):
        config = self.config
        per_pipeline = config.micro_batch_size // input_context.num_input_pipelines
        return data.train_pipeline(
            dataset, image_size=self.size, batch_size=config.micro_batch_size, num_classes=self.classes,
            crop=config.crop, flip=config.flip, randaugment=config.randaugment, mixup_alpha=config.mixup_alpha,
            shuffle_buffer=config.shuffle_buffer, cache=config.cache, seed=config.seed,
            deterministic=config.deterministic, skip_examples=skip_steps * per_pipeline, input_context=input_context,
        )

    def eval(self, dataset, batch_size: int, cache: bool):
        return data.eval_pipeline(dataset, image_size=self.size, batch_size=batch_size, num_classes=self.classes,
                                  cache=cache)

    def images(self, inputs):
        return inputs


@dataclasses.dataclass(frozen=True)
class _NaflexPipelines:
    """The input of a flexible model: `naflex_pipelines.naflex_train_pipeline` / `naflex_eval_pipeline`."""

    config: object
    patch_size: int
    classes: int

    def train(self, dataset, skip_steps: int, input_context):
        from vit_keras.training.naflex_pipelines import naflex_train_pipeline

        config = self.config
        return naflex_train_pipeline(
            dataset, patch_size=self.patch_size, max_num_patches=config.max_patches,
            batch_size=config.micro_batch_size, num_classes=self.classes, crop=config.crop, flip=config.flip,
            buckets=config.naflex_buckets, shuffle_buffer=config.shuffle_buffer, cache=config.cache, seed=config.seed,
            skip_batches=skip_steps, input_context=input_context,
        )

    def eval(self, dataset, batch_size: int, cache: bool):
        from vit_keras.training.naflex_pipelines import naflex_eval_pipeline

        return naflex_eval_pipeline(dataset, patch_size=self.patch_size, max_num_patches=self.config.max_patches,
                                    batch_size=batch_size, num_classes=self.classes,
                                    buckets=self.config.naflex_buckets, cache=cache)

    def images(self, inputs):
        from vit_keras.naflex_data import naflex_images

        return naflex_images(inputs["patches"], inputs["grid"], self.patch_size)


def _fit(model, strategy, plan, config, train_split_data, validation, classes, pipelines, output_dir, verbose,
         extra_callbacks, metric="accuracy", device_prefetch=None, lora=None):
    import keras
    import tensorflow as tf

    dirs = RunDirectories.of(output_dir, strategy)

    sample = next(iter(pipelines.eval(train_split_data.dataset.take(config.log_images or 1),
                                      batch_size=max(config.log_images, 1), cache=False)))
    prepare_keras_fit(model, strategy, tf.nest.map_structure(np.asarray, sample))

    monitor = f"val_{metric}" if validation is not None else metric
    # No host sync after every step unless a callback of the caller's asks for one (cb.StepEndCallback).
    deferred = not any(cb.has_step_end_work(callback) for callback in extra_callbacks)
    if not deferred:
        logger.info("A callback given has per-step work (on_train_batch_end): Keras waits for every step's result.")
    run = resume_run(model, config, dirs.checkpoint_dir, dirs.backup_dir, monitor, "max", deferred=deferred)
    micro_per_epoch, total_micro, start = run.micro_per_epoch, run.total_micro, run.start
    best_checkpoint, last_checkpoint, backup = run.best_checkpoint, run.last_checkpoint, run.backup

    input_path = choose_input_path(strategy=strategy, device_prefetch=device_prefetch)
    logger.info("Training input: %s.", input_path.description)

    def make_train_dataset(skip_steps):
        return input_path.apply(strategy.distribute_datasets_from_function(
            lambda input_context: pipelines.train(train_split_data.dataset, skip_steps, input_context)))

    validation_dataset = None
    if validation is not None:
        validation_dataset = pipelines.eval(validation.dataset, batch_size=config.micro_batch_size, cache=config.cache)
    callbacks = cb.finish_steps_together([
        # First: it raises before any later callback of the same step can save diverged weights.
        # Deferred, it reads the loss at the backup's steps: before anything could write diverged weights.
        cb.StopOnNonFiniteLoss(learning_rate=config.learning_rate, deferred=deferred, check_every=backup.every),
        # Per-epoch only: its batch axis restarts at 0 on every fit() (one per resume); TrainingMonitor writes
        # the batch curves keyed by optimizer updates instead.
        cb.EpochTensorBoard(dirs.log_dir),
        cb.TrainingMonitor(dirs.log_dir, {**config.to_dict(), **{f"lora_{key}": value for key, value in
                                                                  (lora or {}).items()}},
                           config.micro_batch_size, pipelines.images(sample[0]),
                           every=max(micro_per_epoch // 10, 1), deferred=deferred),
        # Before the backup, so that a backup taken at an epoch's end holds that epoch's best value.
        best_checkpoint,
        last_checkpoint,
        backup,
        *extra_callbacks,
    ])
    history = fit_segments(model, make_train_dataset, start, total_micro, micro_per_epoch, validation_dataset,
                           callbacks, verbose)

    updates = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    metrics = {key: float(values[-1]) for key, values in history.items()}
    best_summary = best_checkpoint.summary()
    (logger.warning if best_checkpoint.earlier_best is not None else logger.info)(best_summary)
    if dirs.chief:
        results = json.dumps({"updates": updates, "metrics": metrics, "config": config.to_dict(),
                              "policy": plan.policy, "jit_compile": plan.jit_compile, "notes": list(plan.notes),
                              "input": input_path.description, **({"lora": lora} if lora else {}),
                              "best_checkpoint": {"monitor": monitor, "value": best_checkpoint.best,
                                                  "summary": best_summary},
                              **({"labels": labels} if (labels := local_data.model_labels(model)) else {})},
                             indent=2, default=str)
        write_text(os.path.join(output_dir, "results.json"), results)
    backup.discard()
    dirs.remove_scratch()
    return TrainResult(model, history, metrics, updates, output_dir, plan, input_path.description, lora)
