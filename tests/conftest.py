"""Shared test set-up: quiet TensorFlow, a float32 policy per test, a tiny model, importable timm, and TF-only
tests skipped when KERAS_BACKEND is jax or torch."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402

from tests.tiny import TINY  # noqa: E402
from tests.torch_compat import make_torchvision_importable  # noqa: E402

make_torchvision_importable()


# The TFLite runtime settings that change arithmetic, for `make test-numerics` (scripts/test_numerics.py):
# VIT_KERAS_TFLITE_XNNPACK=0 runs TFLite files on the builtin kernels instead of the default XNNPACK delegate, and
# VIT_KERAS_TFLITE_THREADS=N sets the interpreter's threads where the caller leaves them unset.
TFLITE_XNNPACK_ENV = "VIT_KERAS_TFLITE_XNNPACK"
TFLITE_THREADS_ENV = "VIT_KERAS_TFLITE_THREADS"


def _configure_tflite_runtime():
    xnnpack = os.environ.get(TFLITE_XNNPACK_ENV, "1")
    threads = os.environ.get(TFLITE_THREADS_ENV)
    if xnnpack not in ("0", "1") or (threads is not None and not threads.isdigit()):
        raise pytest.UsageError(
            f"{TFLITE_XNNPACK_ENV} must be 0 or 1 (got {xnnpack!r}) and {TFLITE_THREADS_ENV} a thread count "
            f"(got {threads!r}); unset them for the defaults."
        )
    if xnnpack == "1" and threads is None:
        return
    try:
        from ai_edge_litert import interpreter as litert
    except ImportError:
        return

    class ConfiguredInterpreter(litert.Interpreter):
        def __init__(self, *args, num_threads=None, **kwargs):
            if xnnpack == "0":
                kwargs.setdefault(
                    "experimental_op_resolver_type", litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
                )
            if num_threads is None and threads is not None:
                num_threads = int(threads)
            super().__init__(*args, num_threads=num_threads, **kwargs)

    # vit_keras.export imports the class from this module when it runs a file, so the setting reaches it.
    litert.Interpreter = ConfiguredInterpreter


def pytest_configure(config):
    _configure_tflite_runtime()


# Whole files that exercise TensorFlow itself (SavedModel/TFLite export, tf.distribute, tf.data graphs of Keras
# models); single tests elsewhere carry @pytest.mark.tf_only.
TF_ONLY_FILES = {"test_export.py", "test_export_cli.py", "test_training_distributed.py"}


# The first oneDNN instruction-set cap with kernels for each half precision.
ONEDNN_HALF_PRECISION = {"bfloat16": "AVX512_CORE", "float16": "AVX512_CORE_FP16"}


def tensorflow_half_precision_crash(dtype: str, environ=None) -> str | None:
    """Why a TensorFlow matmul in `dtype` ("bfloat16", "float16") would kill this process, or None.

    TensorFlow 2.21 sends half-precision matmuls to oneDNN by the CPU's flags, and oneDNN capped by
    `ONEDNN_MAX_CPU_ISA` below its kernels for that precision has none: the process dies with a segmentation fault
    (a 64 x 64 tf.matmul on an AMX Xeon: bfloat16 under AVX2 and lower caps, float16 under every cap below
    AVX512_CORE_FP16). `make test-numerics` sets such caps to reproduce other CPUs' float32 arithmetic; a CPU
    without those flags does not crash under them.
    """
    from vit_keras import hardware

    environ = os.environ if environ is None else environ
    cap = environ.get(hardware.ONEDNN_ISA_VARIABLE, "").strip().upper()
    first = ONEDNN_HALF_PRECISION[dtype]
    # The CPU flags that make TensorFlow send that precision's matmuls to oneDNN.
    flags = hardware.BFLOAT16_FLAGS if dtype == "bfloat16" else ("avx512_fp16",)
    if cap not in hardware.ONEDNN_ISAS or hardware.ONEDNN_ISAS.index(cap) >= hardware.ONEDNN_ISAS.index(first):
        return None
    if not set(flags) & hardware.cpu_info().flags:
        return None
    return (f"{hardware.ONEDNN_ISA_VARIABLE}={cap} on a CPU with {'/'.join(flags)}: TensorFlow's {dtype} matmuls "
            f"crash the process there (oneDNN has no {dtype} kernel below {first})")


def pytest_collection_modifyitems(config, items):
    """Mark the TF-only files' tests, and skip every tf_only test on another backend (a backend per process); skip
    a test marked half_precision(dtype) where TensorFlow's matmuls in that precision would crash the process."""
    backend = keras.backend.backend()
    skip = pytest.mark.skip(reason=f"needs the TensorFlow backend (KERAS_BACKEND={backend})")
    for item in items:
        if item.path.name in TF_ONLY_FILES:
            item.add_marker(pytest.mark.tf_only)
        if backend != "tensorflow" and item.get_closest_marker("tf_only"):
            item.add_marker(skip)
        marker = item.get_closest_marker("half_precision")
        crash = marker and backend == "tensorflow" and tensorflow_half_precision_crash(marker.args[0])
        if crash:
            item.add_marker(pytest.mark.skip(reason=crash))


@pytest.fixture
def tiny_kwargs():
    return dict(TINY)


@pytest.fixture(autouse=True)
def _float32_policy():
    """Every test starts and ends under the float32 policy, whatever a failing test left behind."""
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.mixed_precision.set_global_policy("float32")
