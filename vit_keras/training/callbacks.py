"""Callbacks of a training run: TensorBoard extras, best/last checkpoints and step-exact resumption."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time

import keras
import numpy as np

BACKUP_STATE = "backup.json"

logger = logging.getLogger(__name__)


def _gfile():
    # tf.io.gfile reads and writes local paths and gs:// alike (TPU VMs keep runs on GCS).
    import tensorflow as tf

    return tf.io.gfile


def _training_logs(logs) -> dict:
    """An epoch's logs without the validation entries: the training values of its last step."""
    return {key: value for key, value in (logs or {}).items() if not key.startswith("val_")}


class StepEndCallback(keras.callbacks.Callback):
    """A callback whose work follows each training step (`on_step_end(logs)`), run in one of two ways.

    By default in `on_train_batch_end`. Keras then runs every callback's batch-end hook on the training thread and
    first converts each log to a Python float (`keras.callbacks.CallbackList`, `python_utils.pythonify_logs`): the
    host waits for every step's device work before it can start the next. With `deferred=True` the work of step
    k runs at the start of step k+1 (before the step itself, so nothing is lost), or at the epoch's end (first
    thing there with `finish_steps_together`), and gets no logs (`logs=None`: read what is needed from the model
    when it is needed). The callback is then `async_safe`, and when no other callback has per-step work, Keras
    hands the batch-end hooks (progress bar, history) to a thread: the host goes on queueing steps, and waits for
    the device only where a callback reads a value. (Keras' TensorFlow backend keeps its callbacks on the training
    thread whatever they are.)

    Example:
        >>> class Count(StepEndCallback):
        ...     steps = 0
        ...     def on_step_end(self, logs=None):
        ...         self.steps += 1
        >>> count = Count(deferred=True)
        >>> count.on_train_batch_begin(0); count.on_train_batch_begin(1); count.on_epoch_end(0, {})
        >>> count.steps
        2
    """

    def __init__(self, deferred: bool = False):
        super().__init__()
        self.deferred = bool(deferred)
        self.async_safe = self.deferred  # its on_train_batch_end then does nothing
        self._step_running = False
        self._group: tuple = ()  # see `finish_steps_together`

    def on_step_end(self, logs=None):
        """The work after a training step (`logs`: that step's logs, or None when deferred)."""

    def _finish_step(self, logs=None):
        if self._step_running:
            self._step_running = False
            self.on_step_end(logs)

    def on_train_batch_begin(self, batch, logs=None):
        self._finish_step()
        self._step_running = self.deferred

    def on_train_batch_end(self, batch, logs=None):
        if not self.deferred:
            self.on_step_end(logs)

    def on_epoch_end(self, epoch, logs=None):
        # The last step's work of every such callback of the model, in list order, before any epoch-end work (as
        # when it ran after the step); the epoch's training logs are that step's, validation has reset the metrics.
        training_logs = _training_logs(logs)
        for callback in (*self._group, self):
            callback._finish_step(training_logs)


def finish_steps_together(callbacks):
    """`callbacks` (a list for `fit`), its deferred `StepEndCallback`s grouped: at an epoch's end, the first of them
    to see it finishes the last step's work of all, in list order, before any epoch-end work of any callback. (As
    when that work ran after the step: the step backup holds the last step before a checkpoint is written, and the
    loss check runs before both.)

    Example:
        >>> callbacks = finish_steps_together([StopOnNonFiniteLoss(deferred=True), StepBackup("b", deferred=True)])
        >>> [type(callback).__name__ for callback in callbacks[0]._group]
        ['StopOnNonFiniteLoss', 'StepBackup']
    """
    group = tuple(callback for callback in callbacks if isinstance(callback, StepEndCallback) and callback.deferred)
    for callback in group:
        callback._group = group
    return callbacks


def has_step_end_work(callback) -> bool:
    """Whether `callback` makes Keras run the batch-end hooks on the training thread, converting every log to a
    float after every step (a host sync): an `on_train_batch_end` / `on_batch_end` of its own, not `async_safe`.

    Example:
        >>> has_step_end_work(keras.callbacks.History()), has_step_end_work(StepBackup("backup", deferred=True))
        (False, False)
        >>> has_step_end_work(StepBackup("backup"))
        True
    """
    if getattr(callback, "async_safe", False):
        return False
    return not all(getattr(getattr(callback, hook), "_is_default", False)
                   for hook in ("on_train_batch_end", "on_batch_end"))


class EpochTensorBoard(keras.callbacks.TensorBoard):
    """`keras.callbacks.TensorBoard(update_freq="epoch")` without work after each step: the training graph is
    written at the first epoch's end instead of after the first step, so that the callback does not keep Keras'
    batch-end hooks on the training thread (see `StepEndCallback`).

    Example:
        >>> board = EpochTensorBoard("logs")
        >>> board.update_freq, has_step_end_work(board)
        ('epoch', False)
    """

    def __init__(self, log_dir):
        super().__init__(log_dir=log_dir, update_freq="epoch")

    on_train_batch_end = keras.callbacks.Callback.on_train_batch_end  # Keras' default: nothing per step

    def on_epoch_end(self, epoch, logs=None):
        if getattr(self, "_should_write_train_graph", False):
            self._should_write_train_graph = False
            self._write_keras_model_train_graph()
        super().on_epoch_end(epoch, logs)


class TrainingMonitor(StepEndCallback):
    """Write what `keras.callbacks.TensorBoard` does not: learning rate, throughput (images/s), a few input
    images and the run's hyper-parameters (text and the HParams plugin), into `log_dir/train`.

    It also writes the per-batch logs (`batch_loss`, `batch_accuracy`, ...) every `every` micro-steps, keyed by
    `optimizer.iterations`: Keras' TensorBoard restarts its batch axis at 0 on every `fit()`, and a resumed run
    calls `fit()` again, so use it with `update_freq="epoch"` and read the batch curves from here.

    Example:
        >>> from vit_keras.training import finetune
        >>> monitor = TrainingMonitor("logs", finetune().to_dict(), micro_batch_size=64, sample_images=images)
    """

    def __init__(self, log_dir, hparams: dict, micro_batch_size: int, sample_images=None, every: int = 10,
                 deferred: bool = False):
        super().__init__(deferred)
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

    def on_step_end(self, logs=None):
        import tensorflow as tf

        self._ticks_seen += 1
        if self._ticks_seen < self.every:
            return
        if logs is None:  # deferred: the values after the step just done, read (and waited for) only now
            logs = self.model.get_metrics_result()
        step = self._step()
        now = time.perf_counter()
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
        self._step_running = False
        if self._writer is not None:
            self._writer.flush()


class StepBackup(StepEndCallback):
    """Back up weights and optimizer state every `every` micro-steps and at each epoch's end, atomically.

    Unlike `keras.callbacks.BackupAndRestore`, which restarts an interrupted epoch from its beginning, the
    backup records the exact micro-step, so a run killed mid-epoch resumes at that step with the data stream
    positioned after the last example it trained on: the resumed run takes exactly the steps the uninterrupted
    one would. A kill during a write leaves the previous backup intact (see `save`).

    Pass the `save_best_only` `ModelCheckpoint` as `best_checkpoint` (and list it before this callback): its best
    monitored value is backed up too and restored, so the first epoch after a resume replaces `best.keras` only
    when it beats the epochs before the interruption.

    With `deferred=True` (`StepEndCallback`) the backup of step k is written at the start of step k+1 or at the
    epoch's end: the same steps are backed up, with no host sync after the steps in between.

    Example:
        >>> best, last = checkpoint_callbacks("out/checkpoints", "val_accuracy", "max")
        >>> backup = StepBackup("out/backup", every=50, best_checkpoint=best)
        >>> backup.restore(tiny_model)  # the micro-step to start from: 0, as nothing is backed up yet
        0
    """

    def __init__(self, backup_dir: str, every: int | None = None, start_step: int = 0, best_checkpoint=None,
                 deferred: bool = False):
        super().__init__(deferred)
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
        state = self._read_state()
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        model.load_weights(os.path.join(self.backup_dir, state["weights"]))
        self.step = int(state["step"])
        if self.best_checkpoint is not None and state.get("best") is not None:
            if hasattr(self.best_checkpoint, "restore_best"):
                self.best_checkpoint.restore_best(state["best"])
            else:  # a Keras ModelCheckpoint
                self.best_checkpoint.best = float(state["best"])
        return self.step

    def _read_state(self) -> dict:
        """The backup's state file, or a `ValueError` that names it and what to do when it is not what `save`
        writes (a disk filled mid-write on a file system without atomic renames, an edit by hand)."""
        with _gfile().GFile(self.state_path) as handle:
            text = handle.read()
        try:
            state = json.loads(text)
            valid = isinstance(state, dict) and isinstance(state.get("weights"), str) and \
                isinstance(state.get("step"), int) and not isinstance(state.get("step"), bool)
        except json.JSONDecodeError as error:
            valid, reason = False, f"it is not JSON ({error.msg} at line {error.lineno} column {error.colno})"
        else:
            reason = "it lacks the step and weights file a backup records"
        if not valid:
            raise ValueError(f"The resume backup's state file {self.state_path} is corrupt: {reason}. Delete the "
                             f"folder {self.backup_dir} to start the run again from its beginning (the checkpoints "
                             "in checkpoints/ are kept), or write the run to another output directory.")
        return state

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

    def on_step_end(self, logs=None):
        self.step += 1
        self._since += 1
        if self.every and self._since >= self.every:
            self.save()
            self._since = 0

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if self._since:
            self.save()
        self._since = 0

    def discard(self):
        """Remove the backup (the run completed)."""
        gfile = _gfile()
        if gfile.exists(self.state_path):
            gfile.remove(self.state_path)
        self._remove_weights()


# The entry a checkpoint written here carries inside its `.keras` archive: the monitored score it was saved with.
# Keras reads only its own entries, so the file stays an ordinary `.keras` model; the score travels with the model
# it describes (one file, one atomic rename), so no crash can pair a model with another model's score.
SCORE_ENTRY = "vit_keras_score.json"


def _is_remote(path: str) -> bool:
    return "://" in str(path)


@contextlib.contextmanager
def _without_optimizer_if_lora(model):
    """For the block, `model` as Keras saves an uncompiled model, when it has LoRA adapters (see `save_checkpoint`)."""
    from vit_keras.training.lora import lora_settings

    compiled = getattr(model, "compiled", False)
    if not compiled or lora_settings(model) is None:
        yield
        return
    optimizer = model.optimizer
    model.optimizer, model.compiled = None, False
    try:
        yield
    finally:
        model.optimizer, model.compiled = optimizer, compiled


def save_checkpoint(model, path: str, score: dict | None = None) -> None:
    """Save `model` to the `.keras` file `path` atomically, with `score` stored inside (see `checkpoint_score`).

    The model is written to a temporary file beside `path` and renamed into place, so a crash or SIGKILL at any
    moment leaves the previous `path` intact. Remote paths (gs://) are assembled locally and copied up; object
    stores only show an object once its upload completes.

    A model with LoRA adapters is saved uncompiled, without its optimizer: Keras folds the adapters into plain
    kernels in the file, so the optimizer's state (for the adapters and head only) fits no variable of the model
    that loads, and every load would warn that it skips it ("Skipping variable loading for optimizer"). Its
    training resumes from `StepBackup`'s files instead.

    Example:
        >>> save_checkpoint(tiny_model, "run/checkpoints/best.keras", {"monitor": "val_accuracy", "value": 0.97})
        >>> keras.models.load_model("run/checkpoints/best.keras").output_shape
        (None, 10)
    """
    import zipfile

    from vit_keras.files import atomic_file

    def write(target):
        with _without_optimizer_if_lora(model):
            model.save(target)
        if score is not None:
            with zipfile.ZipFile(target, "a") as archive:
                archive.writestr(SCORE_ENTRY, json.dumps(score))
        labels = getattr(model, "vit_keras_labels", None)  # class names of a run on your own images (local_data)
        if labels is not None:
            with zipfile.ZipFile(target, "a") as archive:
                archive.writestr("vit_keras_labels.json", labels)

    if _is_remote(path):
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            local = os.path.join(scratch, os.path.basename(path))
            write(local)
            _gfile().copy(local, path, overwrite=True)
        return
    with atomic_file(path) as tmp:
        write(tmp)


def checkpoint_score(path: str) -> dict | None:
    """The score stored in a checkpoint `save_checkpoint` wrote, e.g. `{"monitor": "val_accuracy", "mode": "max",
    "value": 0.97, "epoch": 3}`; None for a missing, unreadable or unscored file.

    Example:
        >>> save_checkpoint(tiny_model, "run/checkpoints/best.keras", {"monitor": "val_accuracy", "value": 0.97})
        >>> checkpoint_score("run/checkpoints/best.keras")["value"]
        0.97
    """
    import zipfile

    gfile = _gfile()
    if not gfile.exists(path):
        return None
    try:
        with gfile.GFile(path, "rb") as handle, zipfile.ZipFile(handle) as archive:
            score = json.loads(archive.read(SCORE_ENTRY))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    return score if isinstance(score, dict) and isinstance(score.get("value"), int | float) else None


def _readable_keras_file(path: str) -> bool:
    import zipfile

    try:
        with _gfile().GFile(path, "rb") as handle, zipfile.ZipFile(handle) as archive:
            return "config.json" in archive.namelist()
    except (OSError, ValueError, zipfile.BadZipFile):
        return False


class BestCheckpoint(keras.callbacks.Callback):
    """Keep the best model by `monitor` in `path`, replacing it only by a strictly better epoch, across runs.

    The score is stored inside the file (`checkpoint_score`), so a resumed run, or a second run into a finished
    output directory, starts from the score of the `best.keras` already there and keeps it unless it beats it;
    the log says which happened. Non-finite scores never replace anything. A `best.keras` without a score (written
    by another tool, or for another metric) is moved aside to `best.previous.keras` before the first replacement;
    an unreadable one (a truncated write) is replaced. Writes are atomic (`save_checkpoint`).

    Example:
        >>> best = BestCheckpoint("run/checkpoints/best.keras", "val_accuracy", "max")
        >>> print(best.best)  # the stored score, or None
        None
    """

    def __init__(self, path: str, monitor: str = "val_loss", mode: str = "min"):
        super().__init__()
        if mode not in ("min", "max"):
            raise ValueError(f"`mode` must be 'min' or 'max', got {mode!r}.")
        self.path, self.monitor, self.mode = path, monitor, mode
        self.best: float | None = None
        self.earlier_best: float | None = None  # the score already in `path` when this run began
        self.run_best: float | None = None  # this run's best epoch, saved or not
        self._set_aside = False
        score = checkpoint_score(path)
        if score is not None and score.get("monitor") == monitor and score.get("mode", mode) == mode:
            self.best = self.earlier_best = float(score["value"])
            logger.warning("%s holds %s %.6g from an earlier run (epoch %s); it is replaced only by a better epoch.",
                           path, monitor, self.best, score.get("epoch"))
        elif _gfile().exists(path):
            self._set_aside = _readable_keras_file(path)
            logger.warning("%s has no recorded %s (%s): the first scored epoch replaces it%s.", path, monitor,
                           "another metric or an unscored file" if self._set_aside else "unreadable, e.g. a cut write",
                           f", after moving it to {self._previous_path()}" if self._set_aside else "")

    def _previous_path(self) -> str:
        return self.path[: -len(".keras")] + ".previous.keras" if self.path.endswith(".keras") else self.path + ".prev"

    def is_better(self, value: float) -> bool:
        """Whether `value` strictly beats the best score so far (always, when there is none)."""
        if not np.isfinite(value):
            return False
        if self.best is None:
            return True
        return value > self.best if self.mode == "max" else value < self.best

    def restore_best(self, value) -> None:
        """Adopt `value` (from a resume backup) as the best so far unless the stored score is already better."""
        if value is not None and self.is_better(float(value)):
            self.best = float(value)

    def summary(self) -> str:
        """One line on what `path` holds after the run and why.

        Example:
            >>> save_checkpoint(tiny_model, "best.keras", {"monitor": "val_accuracy", "mode": "max", "value": 0.97})
            >>> best = BestCheckpoint("best.keras", "val_accuracy", "max")  # then a run that never beat 0.97
            >>> best.summary()
            "best.keras kept: val_accuracy 0.97 from an earlier run; this run's best was none, not better"
        """
        if self.earlier_best is not None and self.best == self.earlier_best:
            return (f"{self.path} kept: {self.monitor} {self.earlier_best:.6g} from an earlier run; this run's best "
                    f"was {'none' if self.run_best is None else f'{self.run_best:.6g}'}, not better")
        if self.best is None:
            return f"{self.path}: no epoch had a finite {self.monitor}"
        return f"{self.path}: {self.monitor} {self.best:.6g}" + (
            f", beating {self.earlier_best:.6g} from an earlier run" if self.earlier_best is not None else "")

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            logger.warning("%s: no %r in this epoch's logs (%s); best checkpoint not updated.", self.path,
                           self.monitor, sorted(logs or {}))
            return
        value = float(value)
        if np.isfinite(value):
            pick = max if self.mode == "max" else min
            self.run_best = value if self.run_best is None else pick(value, self.run_best)
        if not self.is_better(value):
            logger.info("Epoch %d: %s %.6g does not beat %.6g; %s kept.", epoch + 1, self.monitor, value,
                        self.best, self.path)
            return
        if self._set_aside:
            _gfile().rename(self.path, self._previous_path(), overwrite=True)
            self._set_aside = False
        previous = self.best
        save_checkpoint(self.model, self.path, {"monitor": self.monitor, "mode": self.mode, "value": value,
                                                "epoch": epoch + 1})
        self.best = value
        logger.info("Epoch %d: %s improved from %s to %.6g; saved %s.", epoch + 1, self.monitor,
                    "nothing" if previous is None else f"{previous:.6g}", value, self.path)


class LastCheckpoint(keras.callbacks.Callback):
    """The model at the end of each epoch in `path`, written atomically; never a model whose loss is not finite.

    Example:
        >>> last = LastCheckpoint("run/checkpoints/last.keras")
    """

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(float(loss)):
            logger.warning("Epoch %d ended with loss %s: %s not written.", epoch + 1, loss, self.path)
            return
        metrics = {key: float(value) for key, value in (logs or {}).items() if np.ndim(value) == 0}
        save_checkpoint(self.model, self.path, {"monitor": "epoch", "value": epoch + 1, "metrics": metrics})


class NonFiniteLossError(FloatingPointError):
    """Training stopped because the loss became NaN or infinite (see `StopOnNonFiniteLoss`)."""


class StopOnNonFiniteLoss(StepEndCallback):
    """Stop training with a `NonFiniteLossError` the moment the loss is NaN or infinite.

    List it first: it raises before any later callback of the same step could write the diverged weights, so
    `best.keras`, `last.keras` and the resume backup keep the last good state. (Keras' `TerminateOnNaN` stops
    quietly instead, and the epoch-end callbacks would then save NaN weights.)

    With `deferred=True` (`StepEndCallback`) it reads the loss every `check_every` steps and at each epoch's end
    instead of after every step. Keras' loss is the mean over the epoch so far, so a non-finite step keeps it
    non-finite until the epoch ends: give it the step backup's `every` (and list it before the backup), and it
    still stops the run before anything writes diverged weights.

    Example:
        >>> callbacks = [StopOnNonFiniteLoss(learning_rate=0.03), *checkpoint_callbacks("ckpt", "loss", "min")]
    """

    def __init__(self, learning_rate=None, deferred: bool = False, check_every: int = 1):
        super().__init__(deferred)
        self.learning_rate = learning_rate
        self.check_every = max(int(check_every), 1)
        self._since = 0

    def on_step_end(self, logs=None):
        self._since += 1
        if logs is None:  # deferred: read the loss (waiting for the device) only every check_every steps
            if self._since < self.check_every:
                return
            logs = {"loss": self.model.get_metrics_result().get("loss")}
        self._since = 0
        self._check((logs or {}).get("loss"), "at")

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        self._since = 0
        self._check((logs or {}).get("loss"), "by")

    def _check(self, loss, when: str):
        if loss is None or np.isfinite(float(np.asarray(loss))):
            return
        update = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if self.deferred and self.check_every > 1:
            when = "by"
        raise NonFiniteLossError(
            f"The training loss became {float(np.asarray(loss))} {when} optimizer update {update}: training stopped, "
            "and the checkpoints and resume backup keep the last finite state. Try a lower learning rate"
            + (f" (this run used {self.learning_rate})" if self.learning_rate is not None else "")
            + ", more warmup steps, gradient clipping (clipnorm), precision='float32', and check the inputs for "
            "NaN or infinite values."
        )


def checkpoint_callbacks(checkpoint_dir: str, monitor: str, mode: str):
    """`best.keras` (by `monitor`, kept across runs unless beaten) and `last.keras`, both written atomically and
    loadable with `keras.models.load_model`.

    Example:
        >>> best, last = checkpoint_callbacks("out/checkpoints", "val_accuracy", "max")
        >>> best.path, last.path
        ('out/checkpoints/best.keras', 'out/checkpoints/last.keras')
    """
    _gfile().makedirs(checkpoint_dir)
    best = BestCheckpoint(os.path.join(checkpoint_dir, "best.keras"), monitor=monitor, mode=mode)
    last = LastCheckpoint(os.path.join(checkpoint_dir, "last.keras"))
    return [best, last]
