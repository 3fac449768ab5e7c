"""Callbacks of a training run: TensorBoard extras, best/last checkpoints and step-exact resumption."""

from __future__ import annotations

import json
import os
import time

import keras
import numpy as np

BACKUP_STATE = "backup.json"


def _gfile():
    # tf.io.gfile reads and writes local paths and gs:// alike (TPU VMs keep runs on GCS).
    import tensorflow as tf

    return tf.io.gfile


class TrainingMonitor(keras.callbacks.Callback):
    """Write what `keras.callbacks.TensorBoard` does not: learning rate, throughput (images/s), a few input
    images and the run's hyper-parameters (text and the HParams plugin), into `log_dir/train`.

    It also writes the per-batch logs (`batch_loss`, `batch_accuracy`, ...) every `every` micro-steps, keyed by
    `optimizer.iterations`: Keras' TensorBoard restarts its batch axis at 0 on every `fit()`, and a resumed run
    calls `fit()` again, so use it with `update_freq="epoch"` and read the batch curves from here.

    Example:
        >>> TrainingMonitor("logs", config.to_dict(), micro_batch_size=64, sample_images=x[:8])  # doctest: +SKIP
    """

    def __init__(self, log_dir, hparams: dict, micro_batch_size: int, sample_images=None, every: int = 10):
        super().__init__()
        self.log_dir = os.path.join(log_dir, "train")
        self.hparams = hparams
        self.micro_batch_size = micro_batch_size
        self.sample_images = sample_images
        self.every = max(int(every), 1)
        self._writer = None
        self._tick = None
        self._ticks_seen = 0

    def _summary_writer(self):
        import tensorflow as tf

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        return self._writer

    def _step(self) -> int:
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_train_begin(self, logs=None):
        import tensorflow as tf

        with self._summary_writer().as_default(step=self._step()):
            rows = "\n".join(f"| {k} | {v} |" for k, v in sorted(self.hparams.items()))
            tf.summary.text("hyperparameters", "| name | value |\n|---|---|\n" + rows)
            try:
                from tensorboard.plugins.hparams import api as hp

                hp.hparams({k: v if isinstance(v, bool | int | float | str) else str(v)
                            for k, v in self.hparams.items()})
            except ImportError:  # the text summary above carries the same information
                pass
            if self.sample_images is not None:
                images = np.clip(np.asarray(self.sample_images, np.float32) / 255.0, 0.0, 1.0)
                tf.summary.image("input_images", images, max_outputs=len(images))
        self._tick, self._ticks_seen = time.perf_counter(), 0

    def on_train_batch_end(self, batch, logs=None):
        import tensorflow as tf

        self._ticks_seen += 1
        if self._ticks_seen < self.every:
            return
        now = time.perf_counter()
        step = self._step()
        images_per_second = self._ticks_seen * self.micro_batch_size / max(now - self._tick, 1e-9)
        optimizer = self.model.optimizer
        learning_rate = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
        with self._summary_writer().as_default(step=step):
            tf.summary.scalar("learning_rate", learning_rate)
            tf.summary.scalar("throughput_images_per_second", images_per_second)
            for name, value in (logs or {}).items():
                if np.ndim(value) == 0:
                    tf.summary.scalar(f"batch_{name}", float(value))
        self._tick, self._ticks_seen = now, 0

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.flush()


class StepBackup(keras.callbacks.Callback):
    """Back up weights and optimizer state every `every` micro-steps and at each epoch's end, atomically.

    Unlike `keras.callbacks.BackupAndRestore`, which restarts an interrupted epoch from its beginning, the
    backup records the exact micro-step, so a run killed mid-epoch resumes at that step with the data stream
    positioned after the last example it trained on: the resumed run takes exactly the steps the uninterrupted
    one would. A kill during a write leaves the previous backup intact (see `save`).

    Pass the `save_best_only` `ModelCheckpoint` as `best_checkpoint` (and list it before this callback): its best
    monitored value is backed up too and restored, so the first epoch after a resume replaces `best.keras` only
    when it beats the epochs before the interruption.

    Example:
        >>> best, last = checkpoint_callbacks("out/checkpoints", "val_accuracy", "max")  # doctest: +SKIP
        >>> backup = StepBackup("out/backup", every=50, best_checkpoint=best)  # doctest: +SKIP
        >>> start_step = backup.restore(model)  # doctest: +SKIP
    """

    def __init__(self, backup_dir: str, every: int | None = None, start_step: int = 0, best_checkpoint=None):
        super().__init__()
        self.backup_dir = backup_dir
        self.every = every
        self.step = start_step
        self.best_checkpoint = best_checkpoint
        self._since = 0

    @property
    def state_path(self):
        return os.path.join(self.backup_dir, BACKUP_STATE)

    def _weights_path(self, step: int) -> str:
        return os.path.join(self.backup_dir, f"backup-{step:09d}.weights.h5")

    def restore(self, model) -> int:
        """Load the last backup into `model` (weights + optimizer); return the micro-step to resume at."""
        gfile = _gfile()
        if not gfile.exists(self.state_path):
            return 0
        with gfile.GFile(self.state_path) as handle:
            state = json.load(handle)
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        model.load_weights(os.path.join(self.backup_dir, state["weights"]))
        self.step = int(state["step"])
        if self.best_checkpoint is not None and state.get("best") is not None:
            self.best_checkpoint.best = float(state["best"])
        return self.step

    def save(self):
        """Weights go to a file named by their step; only then does the state file, renamed into place in one
        move, point at them. A kill at any moment leaves a state file and the weights of the same step."""
        gfile = _gfile()
        gfile.makedirs(self.backup_dir)
        weights = self._weights_path(self.step)
        self.model.save_weights(weights)
        state = {"step": self.step, "weights": os.path.basename(weights)}
        best = getattr(self.best_checkpoint, "best", None)
        # Keras starts `best` at None or ±inf (not JSON): those mean "no epoch scored yet" and restore as such.
        if best is not None and np.isfinite(float(best)):
            state["best"] = float(best)
        with gfile.GFile(self.state_path + ".tmp", "w") as handle:
            json.dump(state, handle)
        gfile.rename(self.state_path + ".tmp", self.state_path, overwrite=True)
        self._remove_weights(keep=weights)

    def _remove_weights(self, keep=None):
        gfile = _gfile()
        for path in gfile.glob(os.path.join(self.backup_dir, "backup-*.weights.h5")):
            if keep is None or os.path.basename(path) != os.path.basename(keep):
                gfile.remove(path)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        self._since += 1
        if self.every and self._since >= self.every:
            self.save()
            self._since = 0

    def on_epoch_end(self, epoch, logs=None):
        if self._since:
            self.save()
        self._since = 0

    def discard(self):
        """Remove the backup (the run completed)."""
        gfile = _gfile()
        if gfile.exists(self.state_path):
            gfile.remove(self.state_path)
        self._remove_weights()


def checkpoint_callbacks(checkpoint_dir: str, monitor: str, mode: str):
    """`best.keras` (by `monitor`) and `last.keras`, both loadable with `keras.models.load_model`.

    Example:
        >>> best, last = checkpoint_callbacks("out/checkpoints", "val_accuracy", "max")  # doctest: +SKIP
    """
    _gfile().makedirs(checkpoint_dir)
    best = keras.callbacks.ModelCheckpoint(
        os.path.join(checkpoint_dir, "best.keras"), monitor=monitor, mode=mode, save_best_only=True, verbose=0
    )
    last = keras.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, "last.keras"), verbose=0)
    return [best, last]
