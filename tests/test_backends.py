"""The same library on JAX and PyTorch: a process per Keras backend (KERAS_BACKEND is read once, at `import keras`).

Each backend process runs the reference-fixture tests (vit_jax, transformers, and the timm/transformers family
cases, every fixture family at least once) and a NumPy attention check, then writes the inspection results of a
vit_jax checkpoint; this TensorFlow process compares them with its own. The core install's claim, no TensorFlow
needed for model, weights, inspection, predict and fit, is checked in a JAX process where importing TensorFlow
raises ImportError.

Tolerances: the fixtures' own (2e-5 vit_jax/transformers, 5e-5 relative for the family); inspection across backends
1e-5 absolute on probabilities, distances (pixels) and cosine similarities (measured: at most 2e-6 on this CPU).
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests import backend_worker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSPECTION_TOLERANCE = 1e-5

FIXTURE_TESTS = [
    "tests/test_weights_fixtures.py::test_reference_logits",
    "tests/test_family.py::test_family_fixture_through_from_pretrained_and_keras_round_trip",
    "tests/test_inspection_models.py::test_first_block_attention_matches_numpy_softmax_of_the_blocks_weights",
]
# JAX compiles every new op shape eagerly; on a shared 2-core runner the whole set takes minutes. One case of each
# fixture family and kind of model: vit_jax token, gap and hybrid (ResNet stem), transformers ViT, timm with
# distillation token and with a MAP head, transformers DINOv2 and CLIP.
JAX_CASES = [
    "tests/test_weights_fixtures.py::test_reference_logits[" + case + "]"
    for case in ("vitjax_token_raw", "vitjax_gap", "vitjax_hybrid_r2", "hf_dir")
] + [
    "tests/test_family.py::test_family_fixture_through_from_pretrained_and_keras_round_trip[" + case + "]"
    for case in ("timm_deit_distilled", "timm_siglip_map", "hf_dinov2", "hf_clip_vision")
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
        env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"]))
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
def tensorflow_inspection():
    return backend_worker.inspection_results()


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_fixtures_and_inspection_on_backend(backend, tensorflow_inspection, tmp_path):
    done = _run(backend, ["-m", "tests.backend_worker", "--out", str(tmp_path), *TESTS[backend]])
    output = f"--- {backend} process output ---\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}"
    assert f"KERAS_BACKEND={backend}" in done.stdout, output
    assert done.returncode == 0, output
    with np.load(tmp_path / "inspection.npz") as other:
        assert sorted(other.files) == sorted(tensorflow_inspection)
        for name, expected in tensorflow_inspection.items():
            assert other[name].shape == expected.shape, name
            diff = float(np.abs(other[name] - expected).max())
            assert diff <= INSPECTION_TOLERANCE, f"{name} on {backend} differs from TensorFlow by {diff:.2e}"


def test_core_install_runs_on_jax_without_tensorflow():
    script = os.path.join(ROOT, "scripts", "check_core_install.py")
    case = os.path.join(ROOT, "tests", "fixtures", "family", "timm_deit_distilled")
    done = _run("jax", [script, "--block-tensorflow", "--timm-dir", case], timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stdout + done.stderr
