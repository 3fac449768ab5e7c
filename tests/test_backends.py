"""The same library on JAX and PyTorch: a process per Keras backend (KERAS_BACKEND is read once, at `import keras`).

Each backend process runs the reference-fixture tests (vit_jax, transformers, and the timm/transformers family
cases, every fixture family at least once) and a NumPy attention check, then writes the inspection results of a
vit_jax checkpoint and the weights after two TraceSGD steps from fixed weights, which this TensorFlow process
compares with its own, and runs `training.train` (tf.data input, 2 accumulated micro-batches, TensorBoard) once
uninterrupted and once interrupted + rerun, which must end on the same weights. On JAX (2 logical CPU devices)
`training.parallel`: the model-parallel layout's shardings, and `data_parallel()` training as on one device.

The core install's claim, no TensorFlow needed for model, weights, inspection, predict and fit, is checked in a
JAX process where importing TensorFlow raises ImportError.

Tolerances: the fixtures' own (2e-5 vit_jax/transformers, 5e-5 relative for the family); inspection across backends
1e-5 absolute on probabilities, distances (pixels) and cosine similarities (measured: at most 7.2e-7, PyTorch);
two optimizer steps 1e-6 absolute on weights that move up to 3e-2 (measured: 1.5e-8 JAX); resume 1e-5, as on
TensorFlow (measured: bit-identical on JAX).
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests import backend_worker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Reference: the TensorFlow backend's float32 results; JAX (XLA) and PyTorch kernels order their sums differently:
# attention maps and rollouts in [0, 1] differ by float32 rounding (~1e-6), 1e-5 keeps 10x; one SGD step moves
# weights by lr x gradient (~1e-3), whose float32 rounding differences are ~1e-9, far inside 1e-6.
INSPECTION_TOLERANCE = 1e-5
ONE_STEP_TOLERANCE = 1e-6
RESUME_TOLERANCE = 1e-5  # the TensorFlow resume test's (tests/test_cli_train.py)

FIXTURE_TESTS = [
    "tests/test_weights_fixtures.py::test_reference_logits",
    "tests/test_family.py::test_family_fixture_through_from_pretrained_and_keras_round_trip",
    "tests/test_inspection_models.py::test_first_block_attention_matches_numpy_softmax_of_the_blocks_weights",
    "tests/test_features.py::test_dense_fixture",
    "tests/test_dense_tasks.py::test_reference_case_matches_transformers",
]
# JAX compiles every new op shape eagerly; on a shared 2-core runner the whole set takes minutes. Every fixture
# family at least once (PyTorch runs them all): vit_jax token and hybrid (the ResNet stem's convolutions and group
# norms), transformers ViT, timm with a MAP head, transformers DINOv2 (layer scale).
JAX_CASES = [
    "tests/test_weights_fixtures.py::test_reference_logits[" + case + "]"
    for case in ("vitjax_token_raw", "vitjax_hybrid_r2", "hf_dir")
] + [
    "tests/test_family.py::test_family_fixture_through_from_pretrained_and_keras_round_trip[" + case + "]"
    for case in ("timm_siglip_map", "hf_dinov2")
] + FIXTURE_TESTS[2:]
TESTS = {"jax": JAX_CASES, "torch": FIXTURE_TESTS}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                       reason="launches the other backends from the TensorFlow process"),
]


def _environment(backend):
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get(
        "PYTHONPATH")])))
    if backend == "jax":
        # Tiny test models: XLA's compile time, not run time, dominates; unoptimised code gives the same numbers.
        # Two logical CPU devices for keras.distribution (data and model parallel).
        env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS"), "--xla_backend_optimization_level=0",
                                                  "--xla_force_host_platform_device_count=2"]))
    return env


def _run(backend, args, timeout=900):
    try:
        import importlib.util

        if importlib.util.find_spec(backend) is None:
            pytest.fail(f"{backend} is not installed: `pip install -e '.[{backend}]'` (make test installs it).")
        return subprocess.run([sys.executable, *args], cwd=ROOT, env=_environment(backend), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"{backend} process ran past {timeout} s:\n{error.stdout or ''}{error.stderr or ''}")


@pytest.fixture(scope="module")
def tensorflow_results(tmp_path_factory):
    import vit_keras.training.data

    data_dir = str(tmp_path_factory.mktemp("tfds"))
    vit_keras.training.data.load("vit_keras_digits", data_dir=data_dir)  # prepared once here, only read by the backends
    step = backend_worker.one_step_weights()
    starts = [name for name in step if name.startswith("start_")]
    moves = [float(np.abs(step[name[len("start_"):]] - step[name]).max()) for name in starts]
    # A real step: every weight moves but the key bias (softmax ignores it, its gradient is exactly 0).
    assert sum(move > 0 for move in moves) == len(moves) - 1 and max(moves) > 1e-2, moves
    return dict(inspection=backend_worker.inspection_results(), one_step=step, data_dir=data_dir)


def _compare(path, expected, tolerance, backend):
    with np.load(path) as other:
        assert sorted(other.files) == sorted(expected)
        for name, value in expected.items():
            assert other[name].shape == value.shape, name
            diff = float(np.abs(other[name] - value).max())
            assert diff <= tolerance, f"{name} on {backend} differs from TensorFlow by {diff:.2e} > {tolerance}"


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_fixtures_inspection_and_training_on_backend(backend, tensorflow_results, tmp_path):
    done = _run(backend, ["-m", "tests.backend_worker", "--out", str(tmp_path), "--data-dir",
                          tensorflow_results["data_dir"], *TESTS[backend]])
    output = f"--- {backend} process output ---\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}"
    assert f"KERAS_BACKEND={backend}" in done.stdout, output
    assert done.returncode == 0, output
    _compare(tmp_path / "inspection.npz", tensorflow_results["inspection"], INSPECTION_TOLERANCE, backend)
    _compare(tmp_path / "one_step.npz", tensorflow_results["one_step"], ONE_STEP_TOLERANCE, backend)
    with np.load(tmp_path / "training.npz") as run:
        assert run["updates"].tolist() == [6, 6]  # uninterrupted, and interrupted then rerun to the end
        assert not run["results_after_interrupt"]  # the interrupted run had not finished
        assert run["event_files"] > 0  # TensorBoard scalars
        for name in (n for n in run.files if n.startswith("reference_")):
            resumed = run["resumed_" + name[len("reference_"):]]
            np.testing.assert_allclose(resumed, run[name], rtol=0, atol=RESUME_TOLERANCE, err_msg=name)
    with np.load(tmp_path / "cli_bfloat16.npz") as run:  # the command line, in mixed precision
        assert run["exit_code"] == 0 and run["updates"] == 4
        assert str(run["policy"]) == "mixed_bfloat16" and np.isfinite(run["loss"])
    if backend == "jax":
        _check_jax_parallel(tmp_path / "parallel.npz")


def _check_jax_parallel(path):
    with np.load(path) as run:
        specs = dict(zip(run["spec_names"].tolist(), run["spec_values"].tolist()))
        block = "Transformer_encoderblock_0/"
        assert specs[block + "MultiHeadDotProductAttention_1/query/kernel"] == "(None, 'model', None)"
        assert specs[block + "MultiHeadDotProductAttention_1/attention_output/kernel"] == "('model', None, None)"
        assert specs[block + "MlpBlock_3/Dense_0/kernel"] == "(None, 'model')"
        assert specs[block + "MlpBlock_3/Dense_1/kernel"] == "('model', None)"
        assert specs["head/kernel"] == "(None, None)"  # replicated
        np.testing.assert_allclose(run["sharded_logits"], run["plain_logits"], rtol=0, atol=1e-5)
        assert run["data_parallel_devices"] == 2 and run["updates"] == 6 and run["model_parallel_updates"] == 6
        assert str(run["model_parallel_query_spec"]) == "(None, 'model', None)"  # trained sharded by heads
        for name in (n for n in run.files if n.startswith("single_")):
            # The TensorFlow MirroredStrategy test's tolerance (measured here: 5.5e-6 data-parallel).
            for parallel in ("data_parallel_", "model_parallel_"):
                np.testing.assert_allclose(run[parallel + name[len("single_"):]], run[name], rtol=0,
                                           atol=RESUME_TOLERANCE, err_msg=parallel + name)


@pytest.mark.slow
def test_jax_only_docstring_examples_run_on_jax_with_two_devices():
    """`make test` runs on TensorFlow, where vit_keras.training.parallel's examples are skipped: here they run on
    JAX with two host devices, model_parallel's included."""
    done = _run("jax", ["-m", "pytest", "--doctest-modules", "vit_keras/training/parallel.py", "-q",
                        "-p", "no:cacheprovider", "-rs"], timeout=600)
    assert done.returncode == 0 and "4 passed" in done.stdout and "skipped" not in done.stdout, \
        done.stdout[-4000:] + done.stderr[-2000:]


def test_core_install_runs_on_jax_without_tensorflow():
    script = os.path.join(ROOT, "scripts", "check_core_install.py")
    case = os.path.join(ROOT, "tests", "fixtures", "family", "timm_deit_distilled")
    done = _run("jax", [script, "--block-tensorflow", "--timm-dir", case], timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stdout + done.stderr


def test_keras_distribution_is_refused_off_jax_with_the_fix():
    from vit_keras import training
    from vit_keras.training import parallel

    with pytest.raises(ValueError, match="KERAS_BACKEND=jax"):
        parallel.data_parallel()
    with pytest.raises(ValueError, match="KERAS_BACKEND=jax"):
        parallel.model_parallel(model_devices=2)
    with pytest.raises(ValueError, match="tf.distribute `strategy`"):
        training.train(lambda: None, "vit_keras_digits", training.finetune(total_steps=10, warmup_steps=1),
                       output_dir="unused",
                       distribution=object())
