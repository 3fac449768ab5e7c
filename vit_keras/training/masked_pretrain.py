"""`masked_patch_pretrain()`: self-supervised pre-training by masked patch prediction, resumable, on any strategy.

The paper's recipe (App. B.1.2): Adam, base learning rate 2e-4, 10k warmup steps then cosine decay, 1M steps at
batch 4096; `masked_patch(...)` returns it as a `TrainConfig`, every field overridable (scale it down with
`total_steps`, `batch_size`: warmup then follows the paper's 1%).

Example:
    >>> from vit_keras import training
    >>> training.masked_patch(total_steps=2000, batch_size=64).warmup_steps
    20
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

import keras
import numpy as np

from vit_keras.files import atomic_file
from vit_keras.training import callbacks as cb
from vit_keras.training import data
from vit_keras.training.config import TrainConfig
from vit_keras.training.device_prefetch import choose_input_path
from vit_keras.training.loop import execution_plan, fit_segments, resume_run, write_text
from vit_keras.training.masked_patch import MaskedPatchModel
from vit_keras.training.optim import make_optimizer
from vit_keras.training.run import RunDirectories, run_directory, run_settings
from vit_keras.training.strategy import prepare_keras_fit

logger = logging.getLogger(__name__)

PAPER_STEPS, PAPER_WARMUP = 1_000_000, 10_000


def masked_patch(**overrides) -> TrainConfig:
    """The paper's masked-patch recipe: Adam (β = 0.9, 0.999, no weight decay), learning rate 2e-4, 10k linear
    warmup steps then cosine decay, 1M steps, batch 4096, no dropout, no clipping. Given `total_steps` without
    `warmup_steps`, warmup keeps the paper's share (1%).

    Example:
        >>> masked_patch().learning_rate, masked_patch().schedule
        (0.0002, 'cosine')
    """
    base = TrainConfig(
        recipe="masked_patch", optimizer="adamw", learning_rate=2e-4, schedule="cosine", warmup_steps=PAPER_WARMUP,
        total_steps=PAPER_STEPS, beta_1=0.9, beta_2=0.999, weight_decay=0.0, clipnorm=None, batch_size=4096,
        dropout_rate=0.0,
    )
    if "total_steps" in overrides and "warmup_steps" not in overrides:
        overrides["warmup_steps"] = max(overrides["total_steps"] * PAPER_WARMUP // PAPER_STEPS, 0)
    return base.replace(**overrides)


@dataclasses.dataclass
class MaskedPatchResult:
    """What a pre-training run produced: the `MaskedPatchModel`, its pre-trained `encoder` (a plain ViT, also saved
    as `<output_dir>/encoder.keras`), per-epoch history, final metrics, updates, output directory and the plan.

    Example:
        >>> [field.name for field in dataclasses.fields(MaskedPatchResult)]  # see `masked_patch_pretrain`'s example
        ['model', 'encoder', 'history', 'metrics', 'updates', 'output_dir', 'plan']
    """

    model: object
    encoder: object
    history: dict
    metrics: dict
    updates: int
    output_dir: str
    plan: object


def image_split(source, split: str = "train", *, data_dir: str | None = None) -> data.Split:
    """The images of a tfds split or `tf.data.Dataset` (of images, `(image, label)` or dicts), labels dropped.

    Example:
        >>> image_split(digits).num_classes  # the labels of the digits are dropped
        1
    """
    import tensorflow as tf

    if isinstance(source, data.Split):
        loaded = source
    elif isinstance(source, tf.data.Dataset) and isinstance(source.element_spec, tf.TensorSpec):
        loaded = data.Split(source.map(lambda image: (image, 0)), None, None, "tf.data.Dataset")
    else:
        loaded = data.load(source, split, data_dir=data_dir, num_classes=1)
    # One dummy class: the pipelines carry a label, which masked patch prediction never reads.
    return data.Split(loaded.dataset.map(lambda image, label: (image, tf.zeros((), tf.int32))), 1,
                      loaded.num_examples, loaded.name)


class MaskedPatchFigure(keras.callbacks.Callback):
    """TensorBoard image `masked_patch_predictions` at each epoch's end: for a few fixed images, the original, the
    corrupted input (masked patches black, replaced and kept ones outlined) and the input with every corrupted
    patch filled with the model's prediction, side by side.

    Example:
        >>> figure = MaskedPatchFigure("run/logs", images[:4])  # a few fixed images, shown after every epoch
    """

    def __init__(self, log_dir: str, sample_images, zoom: int = 4):
        super().__init__()
        self.log_dir = os.path.join(log_dir, "train")
        self.sample_images = np.asarray(sample_images, np.float32)
        self.zoom = int(zoom)
        self._writer = None

    def figure(self) -> np.ndarray:
        """(images, height, 3·width + gaps, 3) float in [0, 1]: original | corrupted | predicted per row."""
        model = self.model
        originals = model._as_pixels(self.sample_images)
        corrupted, predicted, roles = model.predict_images(self.sample_images)
        p = model.patch_size
        outline = np.kron((roles > 1).astype(np.float32), np.ones((p, p), np.float32))[..., None]
        corrupted = np.where(outline > 0, 0.6 * corrupted + 0.4 * np.array([255.0, 0.0, 0.0]), corrupted)
        gap = np.full((*originals.shape[:2], max(p // 2, 1), 3), 255.0, np.float32)
        panel = np.concatenate([originals, gap, corrupted, gap, predicted], axis=2)
        panel = np.repeat(np.repeat(panel, self.zoom, axis=1), self.zoom, axis=2)
        return np.clip(panel / 255.0, 0.0, 1.0)

    def on_epoch_end(self, epoch, logs=None):
        import tensorflow as tf

        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        writer = self._writer
        with writer.as_default(step=step):
            tf.summary.image("masked_patch_predictions", self.figure(), max_outputs=len(self.sample_images),
                             description="original | corrupted input (masked black, replaced/kept outlined red) | "
                                         "prediction in every corrupted patch")
        writer.flush()


def masked_patch_pretrain(build_encoder, train_data, config: TrainConfig | None = None, *, output_dir: str,
                          target: str = "mean_colour", corruption_rate: float = 0.5, mask_rate: float = 0.8,
                          random_rate: float = 0.1, target_grid: int = 4, validation_data=None,
                          train_split: str = "train", validation_split: str = "test", data_dir: str | None = None,
                          strategy=None, tpu: str | None = None, verbose="auto") -> MaskedPatchResult:
    """Pre-train the ViT `build_encoder()` returns by masked patch prediction on the images of `train_data`.

    `build_encoder` is called inside the strategy's scope under the chosen dtype policy (build a
    `vit_keras.ViT(..., include_top=False)` there, with `dropout_rate=config.dropout_rate`); `train_data` is a tfds
    name (with `train_split`, `data_dir`), a `data.Split` or a `tf.data.Dataset` of images or `(image, label)`:
    labels are never read. `config` defaults to `masked_patch()` (the paper's recipe); its input options (crop,
    flip, shuffle, seed) and execution options (precision, XLA, accumulation) mean what they mean for `train`.
    `target`, the rates and `target_grid` are those of `MaskedPatchModel`.

    Runs under `select_strategy()` (TPU, several workers or GPUs, or one device) with the precision and XLA plan of
    `plan_execution`, exactly as `train` does. `output_dir` receives `logs/` (TensorBoard: loss, colour accuracy of
    the corrupted patches, learning rate, throughput, input images, and a figure of corrupted inputs and
    predictions), `checkpoints/best.keras` and `last.keras` (the whole `MaskedPatchModel`), `encoder.keras` (the
    plain ViT) and `results.json`; `backup/` lets the same call resume after an interruption at the exact step,
    the corruption's random stream included.

    Example:
        >>> from vit_keras import training
        >>> config = training.masked_patch(total_steps=2, batch_size=16, crop="resize", flip=False)  # a short run
        >>> build = lambda: vit_keras.ViT(image_size=8, patch_size=2, hidden_size=48, num_layers=2, num_heads=3,
        ...                               mlp_dim=96, include_top=False)
        >>> result = training.masked_patch_pretrain(build, digits, config, output_dir="runs/masked", verbose=0)
        >>> classifier = vit_keras.ViT(image_size=8, patch_size=2, hidden_size=48, num_layers=2, num_heads=3,
        ...                            mlp_dim=96, classes=10)
        >>> training.transfer_weights(result.encoder, classifier)
        {'resampled': False, 'head': 'zero-init'}
        >>> result.updates, sorted(os.listdir("runs/masked"))
        (2, ['backup', 'checkpoints', 'encoder.keras', 'logs', 'results.json'])
    """
    from vit_keras.training.loop import _check_dropout, _check_model

    config = config or masked_patch()
    if not isinstance(config, TrainConfig):
        raise ValueError(f"`config` must be a TrainConfig (e.g. training.masked_patch(...)), got {type(config)}.")
    strategy, plan = execution_plan(config, strategy, tpu)
    with run_directory(output_dir, strategy):
        train_images = image_split(train_data, train_split, data_dir=data_dir)
        validation = None if validation_data is None else image_split(validation_data, validation_split,
                                                                      data_dir=data_dir)

        with run_settings(config, plan):
            with strategy.scope():
                encoder = build_encoder()
                if not isinstance(encoder, keras.Model):
                    raise ValueError("`build_encoder` must return a vit_keras.ViT model (e.g. include_top=False).")
                size = _check_model(encoder, config)
                _check_dropout(encoder, config)
                model = MaskedPatchModel(encoder, target=target, corruption_rate=corruption_rate, mask_rate=mask_rate,
                                         random_rate=random_rate, target_grid=target_grid, seed=config.seed,
                                         name="masked_patch_model")
                model.compile(optimizer=make_optimizer(config), jit_compile=plan.jit_compile)
            return _fit(model, strategy, plan, config, train_images, validation, size, output_dir, verbose)


def _fit(model, strategy, plan, config, train_images, validation, size, output_dir, verbose):
    dirs = RunDirectories.of(output_dir, strategy)

    samples = max(config.log_images, 1)
    sample, _ = next(iter(data.eval_pipeline(train_images.dataset.take(samples), image_size=size,
                                             batch_size=samples, num_classes=1, cache=False)))
    sample = np.asarray(sample)
    prepare_keras_fit(model, strategy, (sample,))

    monitor = "val_loss" if validation is not None else "loss"
    # No host sync after every step (callbacks.StepEndCallback): no callback here needs one.
    run = resume_run(model, config, dirs.checkpoint_dir, dirs.backup_dir, monitor, "min", deferred=True)
    input_path = choose_input_path(strategy=strategy)
    logger.info("Training input: %s.", input_path.description)
    micro_per_epoch, total_micro, start = run.micro_per_epoch, run.total_micro, run.start
    best_checkpoint, last_checkpoint, backup = run.best_checkpoint, run.last_checkpoint, run.backup

    def make_train_dataset(skip_steps):
        def dataset_fn(input_context):
            per_pipeline = config.micro_batch_size // input_context.num_input_pipelines
            pipeline = data.train_pipeline(
                train_images.dataset, image_size=size, batch_size=config.micro_batch_size, num_classes=1,
                crop=config.crop, flip=config.flip, randaugment=config.randaugment, mixup_alpha=0.0,
                shuffle_buffer=config.shuffle_buffer, cache=config.cache, seed=config.seed,
                deterministic=config.deterministic, skip_examples=skip_steps * per_pipeline,
                input_context=input_context,
            )
            return pipeline.map(lambda images, labels: images)

        return input_path.apply(strategy.distribute_datasets_from_function(dataset_fn))

    validation_dataset = None
    if validation is not None:
        validation_dataset = data.eval_pipeline(
            validation.dataset, image_size=size, batch_size=config.micro_batch_size, num_classes=1,
            cache=config.cache).map(lambda images, labels: images)
    callbacks = cb.finish_steps_together([
        # First: it raises before any later callback of the same step can save diverged weights.
        cb.StopOnNonFiniteLoss(learning_rate=config.learning_rate, deferred=True, check_every=backup.every),
        cb.EpochTensorBoard(dirs.log_dir),
        cb.TrainingMonitor(dirs.log_dir, {**config.to_dict(), **_objective(model)}, config.micro_batch_size, sample,
                           every=max(micro_per_epoch // 10, 1), deferred=True),
        MaskedPatchFigure(dirs.log_dir, sample),
        best_checkpoint,
        last_checkpoint,
        backup,
    ])
    history = fit_segments(model, make_train_dataset, start, total_micro, micro_per_epoch, validation_dataset,
                           callbacks, verbose)

    updates = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    metrics = {key: float(values[-1]) for key, values in history.items()}
    if dirs.chief:
        encoder_path = os.path.join(output_dir, "encoder.keras")
        if "://" in encoder_path:  # GCS and other remote file systems: Keras writes through tf.io.gfile
            model.encoder.save(encoder_path)
        else:
            with atomic_file(encoder_path) as path:
                model.encoder.save(path)
        write_text(os.path.join(output_dir, "results.json"), json.dumps(
            {"updates": updates, "metrics": metrics, "objective": _objective(model), "config": config.to_dict(),
             "policy": plan.policy, "jit_compile": plan.jit_compile, "notes": list(plan.notes),
             "input": input_path.description},
            indent=2, default=str))
    backup.discard()
    dirs.remove_scratch()
    return MaskedPatchResult(model, model.encoder, history, metrics, updates, output_dir, plan)


def _objective(model) -> dict:
    return {"objective": "masked_patch", "target": model.target, "target_grid": model.target_grid,
            "corruption_rate": model.corruption.corruption_rate, "mask_rate": model.corruption.mask_rate,
            "random_rate": model.corruption.random_rate}
