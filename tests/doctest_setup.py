"""Doctest set-up for `pytest --doctest-modules vit_keras` (part of `make test`): a pytest plugin that the
repository's `conftest.py` loads, so that the package itself ships no test code. It acts on the examples of the
package's modules only; the tests and the examples of other files run without it.

Every example runs with `np`, `keras` and `vit_keras` imported, under the float32 policy, with a fixed seed, in a
fresh temporary working directory (files an example writes vanish with it) in which `tests/` points at the
repository's tests, so examples read the bundled checkpoints as `tests/fixtures/...`. Modules whose optional
dependency is missing are not collected, and examples of TensorFlow-only modules are skipped on other backends, as
tests/conftest.py does for the tests.

Examples may also use these names, made only for the examples that mention them (`EXAMPLE_NAMES`): `tiny_model`
(a 10-class ViT on 32x32 images: patch 8, hidden 48, 2 blocks, 3 heads, MLP 96, the same weights every time),
`images` / `labels` (8 random RGB images in [0, 255] at 32x32, and class ids), `digits` / `digits_test`
(scikit-learn's bundled 8x8 digits as `vit_keras.data.Split`s, train and test), and `saved_model_dir`,
`tflite_file`, `onnx_file`: `tiny_model` exported once per test session (read them, do not write them).

Examples that name a bundled tfds dataset (`vit_keras_digits`, `vit_keras_shapes`) find it prepared: the first
preparation in a data directory prints tfds' "Downloading and preparing dataset ..." line, so it happens here, once
per process, in the run's own empty `TFDS_DATA_DIR` (the repository's `conftest.py`), instead of in whichever
example comes first — the examples' output then does not depend on what an earlier run left behind.
"""

import contextlib
import importlib.util
import io
import os
import re
from pathlib import Path

from _pytest.doctest import DoctestItem

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import vit_keras  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent
PACKAGE = Path(vit_keras.__file__).resolve().parent

# Modules that import an optional dependency at import time, by the dependency (module names, not extras).
OPTIONAL_IMPORTS = {"datasets/digits.py": "tensorflow_datasets", "datasets/shapes.py": "tensorflow_datasets"}
# vit_keras.vit, .utils and .visualize are aliases of vit_keras.compat's modules, and vit_keras.data of
# vit_keras.training.data: their examples run from there.
ALIAS_MODULES = ("vit.py", "utils.py", "visualize.py", "data.py")


def pytest_ignore_collect(collection_path, config):
    """The package's modules that are not collected (paths inside the package); None leaves the others to pytest."""
    try:
        inside = collection_path.resolve().relative_to(PACKAGE).as_posix()
    except ValueError:
        return None
    missing = OPTIONAL_IMPORTS.get(inside)
    if inside in ALIAS_MODULES or (missing and importlib.util.find_spec(missing) is None):
        return True
    return None


def _is_package_example(item) -> bool:
    return isinstance(item, DoctestItem) and PACKAGE in Path(str(item.path)).resolve().parents

# Modules whose examples run TensorFlow itself (SavedModel, TFLite, tf.data, tf.distribute).
TF_ONLY_MODULES = ("vit_keras.export", "vit_keras.datasets", "vit_keras.training", "vit_keras.dense.deployment")
# Modules whose examples run keras.distribution, which vit_keras supports on the JAX backend only: they run with
# KERAS_BACKEND=jax (`KERAS_BACKEND=jax pytest vit_keras/training/parallel.py`).
JAX_ONLY_MODULES = ("vit_keras.training.parallel",)
# Run by tests/test_backends.py on JAX with two host devices.
TWO_DEVICE_EXAMPLES = ("vit_keras.training.parallel.model_parallel",)


# The vit-keras 0.2.0 compatibility modules warn (FutureWarning) on purpose; their examples show the calls.
COMPATIBILITY_MODULES = ("vit_keras.utils", "vit_keras.vit", "vit_keras.visualize", "vit_keras.migration")


# Examples that export, train or build large models (over 1.5 s on 2 cores, as the Makefile's slow rule says):
# marked slow, so `make test-fast` leaves them out. Names as pytest shows them, without the module's path.
SLOW_EXAMPLES = {
    "vit_keras.export",
    "vit_keras.export.compare.export_and_compare",
    "vit_keras.export.lite.tflite",
    "vit_keras.export.naflex",
    "vit_keras.export.naflex.naflex_saved_model",
    "vit_keras.export.naflex.naflex_tflite",
    "vit_keras.export.naflex.naflex_tflite_predict",
    "vit_keras.export.lite.write_tflite",
    "vit_keras.export.onnx.to_onnx",
    "vit_keras.export.serving.saved_model",
    "vit_keras.dense.deployment.dense_saved_model",
    "vit_keras.dense.deployment.dense_tflite",
    "vit_keras.models.applications.ViTR26B32",
    "vit_keras.models.applications.ViTR26S32",
    "vit_keras.models.applications.ViTR50B16",
    "vit_keras.models.applications.ViTR50L32",
    "vit_keras.training.evaluation.evaluate",
    "vit_keras.training.evaluation.few_shot_probe",
    "vit_keras.training.evaluation.inference_function",
    "vit_keras.training.evaluation.predict_dataset",
    "vit_keras.training.linear_probe",
    "vit_keras.training.linear_probe.fit_linear_heads",
    "vit_keras.training.linear_probe.probe_model",
    "vit_keras.training.loop.fit_segments",
    "vit_keras.training.loop.train",
    "vit_keras.training.masked_pretrain.masked_patch_pretrain",
    "vit_keras.training.probe_features.compute_features",
    "vit_keras.training.probe_features.split_features",
}


def pytest_collection_modifyitems(config, items):
    backend = keras.backend.backend()
    skip = pytest.mark.skip(reason=f"needs the TensorFlow backend (KERAS_BACKEND={backend})")
    for item in items:
        if not _is_package_example(item):
            continue
        if item.name in SLOW_EXAMPLES or _names_used(item) & set(SESSION_FILES):
            item.add_marker(pytest.mark.slow)  # an example that reads a session file may be the one that makes it
        # model.quantize says which layers (InputLayer, Dropout, ...) have nothing to quantize.
        item.add_marker(pytest.mark.filterwarnings("ignore:Layer .* does not have a `quantize`:UserWarning"))
        if item.name.startswith(COMPATIBILITY_MODULES):
            item.add_marker(pytest.mark.filterwarnings("ignore:.*vit-keras 0.2.0's API:FutureWarning"))
        if item.name.startswith(JAX_ONLY_MODULES):
            if backend != "jax":
                item.add_marker(pytest.mark.skip(reason=f"needs the JAX backend (KERAS_BACKEND={backend})"))
            elif item.name in TWO_DEVICE_EXAMPLES and len(keras.distribution.list_devices()) < 2:
                item.add_marker(pytest.mark.skip(reason="needs two devices (on a CPU: XLA_FLAGS="
                                                        "--xla_force_host_platform_device_count=2)"))
        elif backend != "tensorflow" and item.name.startswith(TF_ONLY_MODULES):
            item.add_marker(skip)


def tiny_model():
    return vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
                         classes=10)


def digits(split):
    pytest.importorskip("sklearn", reason="the digits come with scikit-learn (the [train] extra)")
    import tensorflow as tf

    from vit_keras.datasets.digits import digits_arrays

    return vit_keras.data.load(tf.data.Dataset.from_tensor_slices(digits_arrays(split)), num_classes=10)


def _exported(export):
    """`tiny_model` exported by `export(model, directory)` into a directory kept for the whole session."""

    def make(session_dir):
        keras.utils.clear_session(free_memory=False)
        keras.utils.set_random_seed(0)  # the weights `tiny_model` gets in the example
        return export(tiny_model(), session_dir)

    return make


def _saved_model(model, directory):
    return vit_keras.export.saved_model(model, str(directory / "saved_model"), version=1)


def _tflite(model, directory):
    return vit_keras.export.tflite(model, str(directory / "vit.tflite"))


def _onnx(model, directory):
    return vit_keras.export.to_onnx(model, str(directory / "vit.onnx"))


# Names an example may use without defining them: made afresh for each example that mentions them.
EXAMPLE_NAMES = {
    "tiny_model": tiny_model,
    "images": lambda: np.random.default_rng(0).uniform(0, 255, (8, 32, 32, 3)).astype("float32"),
    "labels": lambda: np.arange(8) % 10,
    "digits": lambda: digits("train"),
    "digits_test": lambda: digits("test"),
}
# Files made once per session (exports take seconds each), shared by the examples that read them.
SESSION_FILES = {"saved_model_dir": _exported(_saved_model), "tflite_file": _exported(_tflite),
                 "onnx_file": _exported(_onnx)}
_session_files: dict = {}


BUNDLED_DATASETS = ("vit_keras_digits", "vit_keras_shapes")
_prepared_datasets: set = set()


def prepare_bundled_dataset(name: str = BUNDLED_DATASETS[0], data_dir=None) -> str:
    """Prepare the bundled dataset `name` in `data_dir` (default: $TFDS_DATA_DIR) with tfds' progress output
    swallowed; return its directory."""
    import tensorflow_datasets as tfds

    import vit_keras.datasets  # noqa: F401  (registers the builders)

    builder = tfds.builder(name, data_dir=data_dir)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        builder.download_and_prepare()
    return builder.data_dir


def _bundled_datasets_named(item) -> set:
    dtest = getattr(item, "dtest", None)
    if not dtest or importlib.util.find_spec("tensorflow_datasets") is None:
        return set()
    return {name for name in BUNDLED_DATASETS if any(name in example.source for example in dtest.examples)}


def _names_used(item) -> set:
    dtest = getattr(item, "dtest", None)
    source = "\n".join(example.source for example in dtest.examples) if dtest else ""
    return {name for name in (*EXAMPLE_NAMES, *SESSION_FILES) if re.search(rf"\b{name}\b", source)}


@pytest.fixture(autouse=True)
def _doctest_environment(request):
    if not _is_package_example(request.node):
        yield
        return
    doctest_namespace, tmp_path, tmp_path_factory, monkeypatch = (
        request.getfixturevalue(name) for name in ("doctest_namespace", "tmp_path", "tmp_path_factory", "monkeypatch"))
    doctest_namespace.update(np=np, keras=keras, vit_keras=vit_keras)
    used = _names_used(request.node)
    for dataset in sorted(_bundled_datasets_named(request.node) - _prepared_datasets):
        prepare_bundled_dataset(dataset)
        _prepared_datasets.add(dataset)
    for name in sorted(used & set(SESSION_FILES)):
        if name not in _session_files:
            _session_files[name] = SESSION_FILES[name](tmp_path_factory.mktemp(name))
        doctest_namespace[name] = _session_files[name]
    if (REPOSITORY / "tests" / "fixtures").is_dir():
        (tmp_path / "tests").symlink_to(REPOSITORY / "tests", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    keras.utils.clear_session(free_memory=False)  # automatic layer names start afresh (gc.collect is slow)
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(0)
    for name in sorted(used & set(EXAMPLE_NAMES), key=list(EXAMPLE_NAMES).index):
        doctest_namespace[name] = EXAMPLE_NAMES[name]()
    yield
    for name in used:
        doctest_namespace.pop(name, None)
    keras.mixed_precision.set_global_policy("float32")
