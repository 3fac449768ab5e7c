"""tf.distribute: MirroredStrategy over 2 logical CPUs and MultiWorkerMirroredStrategy over 2 local processes
train to the same weights as one device. Each case runs in fresh processes: logical devices and TF_CONFIG are
process-wide."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

# Slow: each test trains in fresh processes (25 to 60 s on 2 cores).
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "training_worker.py")
# float32 all-reduce sums the replica gradients in another order than one device does: 6 SGD steps with
# momentum stay within a few ulps of the weights' scale.
WEIGHT_TOLERANCE = 1e-5


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _load(path):
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


# Adam with optax's epsilon (1e-8, inside the bias correction) gives elements whose gradient is float32 noise
# an O(1) update direction, so another summation order moves them by a few % of one step (3e-3 here); an
# accumulation error would move every element by a whole step.
ADAMW_TOLERANCE = 3e-4  # a tenth of one step


def _assert_same_weights(a, b, atol=WEIGHT_TOLERANCE):
    keys = sorted(k for k in a if k.startswith("w"))
    assert keys and keys == sorted(k for k in b if k.startswith("w"))
    for key in keys:
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=atol, err_msg=key)


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tfds"))


def test_mirrored_two_cpus_matches_single_device(tmp_path, tfds_dir):
    subprocess.run([sys.executable, WORKER, "mirrored", str(tmp_path), tfds_dir], env=_env(), check=True,
                   timeout=400)
    single, mirrored = _load(tmp_path / "single.npz"), _load(tmp_path / "mirrored.npz")
    assert int(mirrored["replicas"]) == 2 and int(mirrored["updates"]) == 6
    _assert_same_weights(single, mirrored)
    initial_head = single["w" + str(len([k for k in single if k.startswith("w")]) - 2)]
    assert np.abs(initial_head).max() > 0  # the zero-initialised head did train


def test_accumulation_under_mirrored_equals_one_big_batch_on_one_device(tmp_path, tfds_dir):
    """2 micro-batches of 8 on 2 replicas (4 examples each) == one batch of 16 on one device, 6 updates, for SGD
    with momentum and an active clip and for AdamW with weight decay (Keras' own accumulation crashes there)."""
    subprocess.run([sys.executable, WORKER, "accumulation", str(tmp_path), tfds_dir], env=_env(), check=True,
                   timeout=400)
    for name in ("sgd", "adamw"):
        single, accumulated = _load(tmp_path / f"{name}_single.npz"), _load(tmp_path / f"{name}_accumulated.npz")
        assert int(accumulated["replicas"]) == 2 and int(accumulated["updates"]) == 6
        _assert_same_weights(single, accumulated, ADAMW_TOLERANCE if name == "adamw" else WEIGHT_TOLERANCE)
        head = "w" + str(len([k for k in single if k.startswith("w")]) - 2)
        assert np.abs(single[head]).max() > 1e-3, name  # the zero-initialised head did train


def test_multi_worker_two_processes_agree_and_chief_writes(tmp_path, tfds_dir):
    # Prepare the dataset once so both workers only read it.
    subprocess.run([sys.executable, "-c", "import vit_keras.training.data as d; d.load('vit_keras_digits', data_dir="
                    f"{tfds_dir!r})"], env=_env(), check=True, timeout=200)
    ports = [_free_port(), _free_port()]
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    processes = [
        subprocess.Popen(
            [sys.executable, WORKER, "multiworker", str(tmp_path), tfds_dir],
            env=_env(TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for index in range(2)
    ]
    try:
        outputs = [process.communicate(timeout=400)[0] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
    chief, other = _load(tmp_path / "worker0.npz"), _load(tmp_path / "worker1.npz")
    assert bool(chief["chief"]) and not bool(other["chief"])
    assert int(chief["replicas"]) == 2 and int(chief["updates"]) == int(other["updates"]) == 6
    _assert_same_weights(chief, other)
    run = tmp_path / "run"
    assert (run / "checkpoints" / "last.keras").is_file() and (run / "results.json").is_file()
    # Worker 1 wrote into scratch space it removed, never next to the chief's files.
    assert sorted(os.listdir(run / "checkpoints")) == ["best.keras", "last.keras"]
    assert not (run / "backup" / "worker1" / "backup.json").exists()


def test_naflex_training_under_mirrored_matches_single_device(tmp_path, tfds_dir):
    """A flexible (NaFlex) model fine-tuned on images of six sizes and aspect ratios (each fit to 16 patches,
    batches padded and masked): 2 replicas each take half of every batch, and the weights end as on one device
    (WEIGHT_TOLERANCE, the fixed-size case's; measured 1.7e-7)."""
    subprocess.run([sys.executable, WORKER, "naflex_mirrored", str(tmp_path), tfds_dir], env=_env(), check=True,
                   timeout=400)
    single, mirrored = _load(tmp_path / "naflex_single.npz"), _load(tmp_path / "naflex_mirrored.npz")
    assert int(single["replicas"]) == 1 and int(mirrored["replicas"]) == 2
    assert int(single["updates"]) == int(mirrored["updates"]) == 6
    _assert_same_weights(single, mirrored)
    head = "w" + str(len([k for k in single if k.startswith("w")]) - 2)
    assert np.abs(single[head]).max() > 1e-3  # the zero-initialised head did train
