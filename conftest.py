"""Hermetic test runs: the suite never reads or writes the user's home directory or a per-user cache.

pytest loads this file before `tests/conftest.py` and the doctest set-up (`tests/doctest_setup.py`, a plugin
loaded from here so that the package ships no test code), so before anything imports TensorFlow, Keras, tfds,
huggingface_hub, torch, matplotlib or Jupyter. Each pytest process (the main one and every pytest-xdist worker)
gets its own empty directory under one temporary directory per run, and every environment variable that locates a
home, a cache or a per-user configuration points into it: tfds prepares the bundled dataset there, Keras writes
its `keras.json` there, the Hugging Face cache starts empty, and so on. The subprocesses that
tests start inherit the same variables. The run's directory is removed when the main process ends.

`tests/test_hermetic.py` runs part of the suite with `HOME` pointed at an empty directory and checks that the
directory is still empty afterwards; `.ci/run` does the same for the whole of `make test`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Where the run's directory is (set by the first pytest process of a run, inherited by its workers and children).
RUN_DIRECTORY_ENV = "VIT_KERAS_TEST_RUN_DIR"
# The home directory the run was started from, so tests can check that it stays untouched.
REAL_HOME_ENV = "VIT_KERAS_TEST_REAL_HOME"

# Each variable that locates a per-user directory, and the folder it gets inside the process' directory.
ISOLATED_DIRECTORIES = {
    "HOME": "home",
    "XDG_CACHE_HOME": "xdg-cache",
    "XDG_CONFIG_HOME": "xdg-config",
    "XDG_DATA_HOME": "xdg-data",
    "XDG_STATE_HOME": "xdg-state",
    "TFDS_DATA_DIR": "tensorflow_datasets",  # default ~/tensorflow_datasets
    "KERAS_HOME": "keras",  # default ~/.keras (keras.json, downloads)
    "HF_HOME": "huggingface",  # default ~/.cache/huggingface (hub cache, token)
    "TORCH_HOME": "torch",  # default ~/.cache/torch
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",  # default /tmp/torchinductor_<user>, shared by every run
    "TRITON_CACHE_DIR": "triton",  # default ~/.triton
    "MPLCONFIGDIR": "matplotlib",  # default ~/.config/matplotlib (font cache)
    "JUPYTER_CONFIG_DIR": "jupyter-config",  # the notebook tests start Jupyter kernels
    "JUPYTER_DATA_DIR": "jupyter-data",
    "JUPYTER_RUNTIME_DIR": "jupyter-runtime",
    "IPYTHONDIR": "ipython",
}
# Variables that would send a library to another cache, a token or a server than the one the tests set up.
CLEARED = (
    "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ASSETS_CACHE", "HF_XET_CACHE", "HF_TOKEN", "HF_TOKEN_PATH",
    "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_CACHE",
    "JAX_COMPILATION_CACHE_DIR", "KERAS_BACKEND_CONFIG",
)


def isolate_process(environ=os.environ) -> str:
    """Point `environ`'s per-user locations at a new empty directory for this process and return that directory."""
    run_directory = environ.get(RUN_DIRECTORY_ENV)
    if not run_directory or not os.path.isdir(run_directory):
        run_directory = tempfile.mkdtemp(prefix="vit-keras-tests-")
        environ[RUN_DIRECTORY_ENV] = run_directory
        environ.setdefault(REAL_HOME_ENV, os.path.expanduser("~"))
        atexit.register(shutil.rmtree, run_directory, ignore_errors=True)
    process_directory = tempfile.mkdtemp(prefix=f"pid{os.getpid()}-", dir=run_directory)
    for name, folder in ISOLATED_DIRECTORIES.items():
        path = os.path.join(process_directory, folder)
        os.makedirs(path)
        environ[name] = path
    for name in CLEARED:
        environ.pop(name, None)
    environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    return process_directory


PROCESS_DIRECTORY = isolate_process()

# The set-up of the package's docstring examples; pytest imports it after this module, so after the isolation above.
pytest_plugins = ["tests.doctest_setup"]


def pytest_configure(config):
    # pytest's own temporary directories (tmp_path) live in this process' directory too, not in
    # /tmp/pytest-of-<user>; pytest-xdist hands each worker a folder of it. Per process, not per run: pytest empties
    # a --basetemp it is given, and a pytest that a test starts (tests/test_backends.py) would empty the run's.
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = os.path.join(PROCESS_DIRECTORY, "pytest")
