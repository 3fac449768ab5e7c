"""The training input's device prefetching (`vit_keras.training.device_prefetch`), on a CPU: the prefetching paths
hand out exactly the batches of the plain path, `training.train` learns the same weights through them, and a machine
without an accelerator takes, and reports, the plain path. Also the run's callbacks without a host sync after every
step (`callbacks.StepEndCallback`, deferred): the same backups, the same stop on a non-finite loss.

The PyTorch and JAX cases run in a process of their own (KERAS_BACKEND is read once, at `import keras`):
`python tests/test_device_prefetch.py BACKEND OUT` is that process.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _batches(count=5, batch=4, rows=None):
    """`count` batches of (images, labels); `rows` examples in all when given (the last batch partial)."""
    rng = np.random.default_rng(0)
    rows = count * batch if rows is None else rows
    images = rng.normal(size=(rows, 3, 2)).astype(np.float32)
    labels = np.arange(rows, dtype=np.int32)
    return [(images[i:i + batch], labels[i:i + batch]) for i in range(0, rows, batch)]


def _equal(expected, got):
    import keras

    got = [keras.tree.map_structure(lambda value: np.asarray(value), batch) for batch in got]
    assert len(got) == len(expected)
    for want, have in zip(expected, got, strict=True):
        keras.tree.assert_same_structure(want, have)
        for a, b in zip(keras.tree.flatten(want), keras.tree.flatten(have), strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)


def _torch_cases():
    """The torch prefetcher against its input: order and values, a partial last batch, dicts, empty and exhausted
    input, and a second pass over a re-iterable source."""
    import tensorflow as tf

    from vit_keras.training.device_prefetch import TorchDevicePrefetcher

    partial = _batches(rows=18)  # 4 + 4 + 4 + 4 + 2
    assert len(partial[-1][0]) == 2
    _equal(partial, TorchDevicePrefetcher(partial, "cpu"))
    _equal(partial, TorchDevicePrefetcher(partial, "cpu", ahead=3))
    dicts = [{"patches": x, "mask": y % 2 == 0} for x, y in partial]
    _equal(dicts, TorchDevicePrefetcher(dicts, "cpu"))
    assert list(TorchDevicePrefetcher([], "cpu")) == []
    used = iter(partial)
    list(used)
    assert list(TorchDevicePrefetcher(used, "cpu")) == []  # an exhausted iterator: nothing, no error
    images = np.concatenate([x for x, _ in partial])
    labels = np.concatenate([y for _, y in partial])
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(4)
    prefetcher = TorchDevicePrefetcher(dataset, "cpu")
    _equal(partial, prefetcher)
    _equal(partial, prefetcher)  # each pass starts again from the dataset
    _equal([], TorchDevicePrefetcher(dataset.take(0), "cpu"))


def test_tf_prefetch_to_device_hands_out_the_same_batches():
    import tensorflow as tf

    from vit_keras.training.device_prefetch import choose_input_path

    path = choose_input_path(backend="tensorflow", accelerator=None, device_prefetch=True)
    assert path.builds and path.device == "/cpu:0"
    partial = _batches(rows=18)
    images = np.concatenate([x for x, _ in partial])
    labels = np.concatenate([y for _, y in partial])
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(4)
    prefetched = path.apply(dataset)
    _equal(partial, prefetched)
    _equal(partial, prefetched)  # a second epoch over the same dataset
    dicts = tf.data.Dataset.from_tensor_slices({"patches": images, "mask": labels % 2 == 0}).batch(4)
    _equal([{"patches": x, "mask": y % 2 == 0} for x, y in partial], path.apply(dicts))
    _equal([], path.apply(dataset.take(0)))


def test_torch_prefetcher_hands_out_the_same_batches():
    pytest.importorskip("torch")
    _torch_cases()


def test_the_choice_follows_the_backend_and_the_hardware():
    from vit_keras.training.device_prefetch import HOST, choose_input_path

    for backend in ("tensorflow", "torch", "jax"):
        path = choose_input_path(backend=backend, accelerator=None)
        assert not path.builds and path.description == HOST == "host (no accelerator)"
        assert path.apply("dataset") == "dataset"
    gpu = choose_input_path(backend="tensorflow", accelerator="/gpu:0")
    assert gpu.builds and gpu.device == "/gpu:0" and gpu.description.startswith("device prefetch (tf.data")
    cuda = choose_input_path(backend="torch", accelerator="cuda:0")
    assert cuda.builds and cuda.device == "cuda:0" and "pinned memory, non_blocking" in cuda.description
    for backend, device in (("tensorflow", "/gpu:0"), ("torch", "cuda:0")):  # the override keeps the plain path
        off = choose_input_path(backend=backend, accelerator=device, device_prefetch=False)
        assert not off.builds and off.description.startswith("host (device prefetch off")
    # Keras' JAX trainer transfers one batch ahead itself; tf.distribute prefetches each replica's part.
    jax_gpu = choose_input_path(backend="jax", accelerator="gpu", distribution=None)
    assert not jax_gpu.builds and "Keras' JAX trainer: one batch ahead" in jax_gpu.description
    jax_sharded = choose_input_path(backend="jax", accelerator="gpu", distribution=object())
    assert not jax_sharded.builds and "keras.distribution" in jax_sharded.description

    class Mirrored:
        num_replicas_in_sync = 2

    mirrored = choose_input_path(backend="tensorflow", strategy=Mirrored(), accelerator="/gpu:0")
    assert not mirrored.builds and "tf.distribute" in mirrored.description


def test_this_machine_without_an_accelerator_takes_the_plain_path():
    import keras

    from vit_keras import hardware
    from vit_keras.training.device_prefetch import choose_input_path

    if hardware.default_kind() != "CPU":
        pytest.skip("this machine has an accelerator")
    assert choose_input_path().description == "host (no accelerator)"
    assert keras.backend.backend() == "tensorflow" or not choose_input_path().builds


def _tiny_run(output_dir, device_prefetch, callbacks=(), deterministic=True):
    """A few `training.train` steps of the training tests' tiny ViT on fixed data; its final weights and result."""
    import tensorflow as tf

    import vit_keras
    from tests.tiny import TINY_TRAINING
    from vit_keras import training

    rng = np.random.default_rng(1)
    images = rng.uniform(0, 255, (40, 16, 16, 3)).astype(np.float32)
    labels = np.arange(40) % 10
    config = training.finetune(total_steps=4, steps_per_epoch=2, batch_size=8, warmup_steps=0, precision="float32",
                               learning_rate=0.05, log_images=2, seed=5, deterministic=deterministic)
    result = training.train(
        lambda: vit_keras.ViT(image_size=16, classes=10, classifier_activation=None, **TINY_TRAINING),
        tf.data.Dataset.from_tensor_slices((images, labels)), config, output_dir=output_dir, num_classes=10,
        verbose=0, device_prefetch=device_prefetch, callbacks=callbacks)
    return [np.asarray(weight) for weight in result.model.get_weights()], result


def _check_runs(out, host_result, prefetch_result):
    """Both runs trained 4 updates, said which input path they took, and wrote it into results.json."""
    assert host_result.updates == prefetch_result.updates == 4
    assert host_result.input_path == "host (no accelerator)"
    assert prefetch_result.input_path.startswith("device prefetch (")
    for name, result in (("host", host_result), ("prefetch", prefetch_result)):
        with open(os.path.join(out, name, "results.json")) as handle:
            assert json.load(handle)["input"] == result.input_path


@pytest.mark.slow
def test_train_learns_the_same_weights_with_and_without_prefetching(tmp_path):
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("the other backends run in test_other_backends_learn_the_same_weights")
    from tensorflow.python.framework.config import is_op_determinism_enabled

    # With XLA first (the train step compiled, as on a GPU; the prefetched iterator stays outside the compiled
    # step): Keras drops XLA for the rest of the process once a deterministic run has turned op determinism on.
    if not is_op_determinism_enabled():
        host_xla, host_xla_result = _tiny_run(str(tmp_path / "host_xla"), False, deterministic=False)
        prefetched_xla, prefetch_xla_result = _tiny_run(str(tmp_path / "prefetch_xla"), True, deterministic=False)
        assert host_xla_result.model.jit_compile and prefetch_xla_result.model.jit_compile
        for a, b in zip(host_xla, prefetched_xla, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    host, host_result = _tiny_run(str(tmp_path / "host"), None)  # the automatic choice: no accelerator here
    prefetched, prefetch_result = _tiny_run(str(tmp_path / "prefetch"), True)  # forced: prefetched to the CPU
    _check_runs(str(tmp_path), host_result, prefetch_result)
    assert prefetch_result.input_path == "device prefetch (tf.data prefetch_to_device /cpu:0, 2 batches ahead)"
    assert len(host) == len(prefetched)
    for a, b in zip(host, prefetched, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_other_backends_learn_the_same_weights(backend, tmp_path):
    import importlib.util

    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("launched from the TensorFlow process")
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    env = dict(os.environ, KERAS_BACKEND=backend,
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    if backend == "jax":
        env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"]))
    done = subprocess.run([sys.executable, os.path.abspath(__file__), backend, str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    with open(tmp_path / "paths.json") as handle:
        paths = json.load(handle)
    assert paths["auto"] == "host (no accelerator)"
    if backend == "torch":
        assert paths["forced"] == "device prefetch (cpu: no accelerator, one batch ahead)"
    else:  # nothing is built on JAX: Keras' trainer transfers ahead itself, and here there is no accelerator
        assert paths["forced"] == "host (no accelerator)"
    # No host sync after every step: Keras ran the batch-end hooks (and their float conversion) on another thread.
    assert paths["batch_end_on_training_thread"] == [False]


def _fit_with(callbacks, poison_step=None, epochs=2, steps=4):
    """A Dense model fit for `epochs` x `steps` steps of batch 2, the batch of step `poison_step` (1-based) NaN."""
    import keras

    rng = np.random.default_rng(2)
    x = rng.normal(size=(steps * 2, 3)).astype(np.float32)
    y = rng.normal(size=(steps * 2, 1)).astype(np.float32)
    if poison_step is not None:
        x[(poison_step - 1) * 2:poison_step * 2] = np.nan
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=2, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)
    return model


class _Recorded:
    """StepBackup whose saves are recorded (the step, and whether the weights were finite) instead of written."""

    def __new__(cls, deferred, every):
        from vit_keras.training.callbacks import StepBackup

        class Backup(StepBackup):
            def save(self):
                finite = all(np.isfinite(np.asarray(w)).all() for w in self.model.get_weights())
                self.saved.append((self.step, bool(finite)))

        backup = Backup("unused", every=every, deferred=deferred)
        backup.saved = []
        return backup


def test_deferred_step_work_backs_up_the_same_steps_without_a_per_step_hook():
    from vit_keras.training.callbacks import EpochTensorBoard, StopOnNonFiniteLoss, TrainingMonitor, has_step_end_work

    saves = {}
    for deferred in (False, True):
        backup = _Recorded(deferred, every=3)
        _fit_with([StopOnNonFiniteLoss(deferred=deferred, check_every=3), backup])
        saves[deferred] = backup.saved
    assert saves[False] == saves[True] == [(3, True), (4, True), (7, True), (8, True)]
    # Deferred, nothing of the run's own asks Keras for the batch-end hooks on the training thread.
    assert not any(has_step_end_work(callback) for callback in (
        StopOnNonFiniteLoss(deferred=True), _Recorded(True, 2), TrainingMonitor("logs", {}, 8, deferred=True),
        EpochTensorBoard("logs")))
    assert all(has_step_end_work(callback) for callback in (StopOnNonFiniteLoss(), _Recorded(False, 2)))


def test_an_epochs_last_step_is_backed_up_before_any_epoch_end_work():
    import keras

    from vit_keras.training.callbacks import StopOnNonFiniteLoss, finish_steps_together

    class Preempted(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise KeyboardInterrupt

    backup = _Recorded(True, every=2)
    with pytest.raises(KeyboardInterrupt):  # listed before the backup, as the checkpoints are in train()
        _fit_with(finish_steps_together([StopOnNonFiniteLoss(deferred=True, check_every=2), Preempted(), backup]))
    assert backup.saved == [(2, True), (4, True)]  # step 4, the epoch's last, as when it was saved after the step


def test_deferred_loss_check_stops_before_a_backup_holds_diverged_weights():
    from vit_keras.training.callbacks import NonFiniteLossError, StopOnNonFiniteLoss

    backup = _Recorded(True, every=2)
    # Step 3 diverges; the loss (the epoch's running mean) is read at the backup's steps: after step 4, before the
    # backup of step 4 is written.
    with pytest.raises(NonFiniteLossError, match="loss became nan by optimizer update 4"):
        _fit_with([StopOnNonFiniteLoss(deferred=True, check_every=2), backup], poison_step=3)
    assert backup.saved == [(2, True)]
    backup = _Recorded(True, every=1)
    with pytest.raises(NonFiniteLossError, match="loss became nan at optimizer update 3"):
        _fit_with([StopOnNonFiniteLoss(deferred=True, check_every=1), backup], poison_step=3)
    assert backup.saved == [(1, True), (2, True)]


def _worker(backend, out):
    """The subprocess: the torch prefetcher's cases, then the tiny run with and without prefetching, same weights."""
    import keras

    assert keras.backend.backend() == backend
    if backend == "torch":
        _torch_cases()
    import threading

    class ThreadProbe(keras.callbacks.Callback):
        """Where Keras runs the batch-end hooks: off the training thread when no callback needs them on it."""

        async_safe = True
        threads = set()

        def on_train_batch_end(self, batch, logs=None):
            self.threads.add(threading.current_thread() is threading.main_thread())

    host, host_result = _tiny_run(os.path.join(out, "host"), None)
    prefetched, prefetch_result = _tiny_run(os.path.join(out, "prefetch"), True, callbacks=[ThreadProbe()])
    for a, b in zip(host, prefetched, strict=True):
        np.testing.assert_array_equal(a, b)
    with open(os.path.join(out, "paths.json"), "w") as handle:
        json.dump({"auto": host_result.input_path, "forced": prefetch_result.input_path,
                   "batch_end_on_training_thread": sorted(ThreadProbe.threads)}, handle)


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
