"""The zero-shot reference cases on the JAX and PyTorch backends (a subprocess each, tests/zeroshot_backend_worker.py),
directly and after a `.keras` round trip of both towers, within the fixtures' tolerance (tests/zeroshot_cases.py),
with the tokenizer's ids equal to the fixtures'."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests import zeroshot_cases as cases

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                       reason="launches the other backends from the TensorFlow process"),
]


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_reference_cases_on_backend(backend, tmp_path):
    import importlib.util

    if importlib.util.find_spec(backend) is None:
        pytest.fail(f"{backend} is not installed: `pip install -e '.[{backend}]'` (make test installs it).")
    env = dict(os.environ, KERAS_BACKEND=backend,
               PYTHONPATH=os.pathsep.join(filter(None, [cases.ROOT, os.environ.get("PYTHONPATH")])))
    if backend == "jax":  # tiny models: XLA's compile time dominates; unoptimised code gives the same numbers
        env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS"), "--xla_backend_optimization_level=0"]))
    run = subprocess.run([sys.executable, "-m", "tests.zeroshot_backend_worker", "--out", str(tmp_path)],
                         cwd=cases.ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"backend {backend}" in run.stdout
    for case in cases.CASES:
        expected = cases.expected(case)
        for name in (case, f"{case}_reloaded"):
            with np.load(tmp_path / f"{name}.npz") as found:
                differences = cases.relative_differences(found, expected)
                assert max(differences.values()) <= cases.RELATIVE_TOLERANCE, (backend, name, differences)
                assert (found["logits_per_image"].argmax(-1) == expected["logits_per_image"].argmax(-1)).all()
                if name == case:
                    np.testing.assert_array_equal(found["token_ids"],
                                                  np.load(os.path.join(cases.case_dir(case), "token_ids.npy")))
