"""Doctest set-up for `pytest --doctest-modules vit_keras` (part of `make test`).

Every example runs with `np`, `keras` and `vit_keras` imported, under the float32 policy, with a fixed seed, in a
fresh temporary working directory (files an example writes vanish with it) in which `tests/` points at the
repository's tests, so examples read the bundled checkpoints as `tests/fixtures/...`. Modules whose optional
dependency is missing are not collected, and examples of TensorFlow-only modules are skipped on other backends, as
tests/conftest.py does for the tests.
"""

import importlib.util
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import vit_keras  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent

# Modules that import an optional dependency at import time, by the dependency (module names, not extras).
OPTIONAL_IMPORTS = {"datasets/digits.py": "tensorflow_datasets"}
collect_ignore = [path for path, module in OPTIONAL_IMPORTS.items() if importlib.util.find_spec(module) is None]
# vit_keras.vit, .utils and .visualize are aliases of vit_keras.compat's modules, and vit_keras.data of
# vit_keras.training.data: their examples run from there.
collect_ignore += ["vit.py", "utils.py", "visualize.py", "data.py"]

# Modules whose examples run TensorFlow itself (SavedModel, TFLite, tf.data, tf.distribute).
TF_ONLY_MODULES = ("vit_keras.export", "vit_keras.datasets", "vit_keras.training")


# The vit-keras 0.2.0 compatibility modules warn (FutureWarning) on purpose; their examples show the calls.
COMPATIBILITY_MODULES = ("vit_keras.utils", "vit_keras.vit", "vit_keras.visualize", "vit_keras.migration")


def pytest_collection_modifyitems(config, items):
    backend = keras.backend.backend()
    skip = pytest.mark.skip(reason=f"needs the TensorFlow backend (KERAS_BACKEND={backend})")
    for item in items:
        # model.quantize says which layers (InputLayer, Dropout, ...) have nothing to quantize.
        item.add_marker(pytest.mark.filterwarnings("ignore:Layer .* does not have a `quantize`:UserWarning"))
        if item.name.startswith(COMPATIBILITY_MODULES):
            item.add_marker(pytest.mark.filterwarnings("ignore:.*vit-keras 0.2.0's API:FutureWarning"))
        if backend != "tensorflow" and item.name.startswith(TF_ONLY_MODULES):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _doctest_environment(doctest_namespace, tmp_path, monkeypatch):
    doctest_namespace.update(np=np, keras=keras, vit_keras=vit_keras)
    if (REPOSITORY / "tests" / "fixtures").is_dir():
        (tmp_path / "tests").symlink_to(REPOSITORY / "tests", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    keras.utils.clear_session(free_memory=False)  # automatic layer names start afresh (gc.collect is slow)
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.mixed_precision.set_global_policy("float32")
