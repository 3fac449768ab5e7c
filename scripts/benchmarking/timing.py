"""What every measurement shares: timing calls, the TF32 setting, a batch on the device, the device's name and
the worker's own peak memory."""

from __future__ import annotations

import resource
import statistics
import time


class Skipped(Exception):
    """The peer this case needs is not installed."""


def time_calls(step, batch, min_seconds, min_calls):
    """Median seconds per call after two warm-up calls (the first one compiles)."""
    compile_start = time.perf_counter()
    step()
    compile_seconds = time.perf_counter() - compile_start
    step()
    durations = []
    start = time.perf_counter()
    while len(durations) < min_calls or time.perf_counter() - start < min_seconds:
        begin = time.perf_counter()
        step()
        durations.append(time.perf_counter() - begin)
    median = statistics.median(durations)
    return {"images_per_s": batch / median, "ms_per_batch": 1000 * median, "calls": len(durations),
            "first_call_s": compile_seconds}


def set_tf32(backend, case):
    """Turn TF32 matmuls on or off as `case["tf32"]` says (None: the framework's default). Returns the state the
    float32 matmuls of this case run in: True (TF32), False (full float32), or None for a half-precision case."""
    on_gpu = backend_device(backend) == "GPU"
    asked = case.get("tf32")
    if backend == "torch":
        import torch

        if asked is not None:
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(asked)
        state = on_gpu and torch.backends.cuda.matmul.allow_tf32
    elif backend == "jax":
        import jax

        if asked is not None:
            jax.config.update("jax_default_matmul_precision", "tensorfloat32" if asked else "highest")
        # JAX's default precision runs float32 matmuls in TF32 on GPUs that have it (Ampere and later).
        state = on_gpu and jax.config.jax_default_matmul_precision in (None, "default", "tensorfloat32",
                                                                        "bfloat16")
    else:
        import tensorflow as tf

        if asked is not None:
            tf.config.experimental.enable_tensor_float_32_execution(bool(asked))
        state = on_gpu and tf.config.experimental.tensor_float_32_execution_enabled()
    return bool(state) if case["precision"] == "float32" else None


def to_device(backend, *arrays):
    """The arrays on the backend's default device, and a function that waits for that device's work to end."""
    if backend == "jax":
        import jax

        placed = [jax.device_put(array) for array in arrays]
        return (*placed, lambda outputs: jax.block_until_ready(outputs))
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    placed = [torch.as_tensor(array, device=device) for array in arrays]
    return (*placed, lambda outputs: torch.cuda.synchronize() if device == "cuda" else None)


def backend_device(backend) -> str:
    if backend == "jax":
        import jax

        platform = jax.devices()[0].platform.upper()
        return "GPU" if platform in ("GPU", "CUDA", "ROCM") else platform
    if backend == "torch":
        import torch

        return "GPU" if torch.cuda.is_available() else "CPU"
    import tensorflow as tf

    return "GPU" if tf.config.list_physical_devices("GPU") else "CPU"


def own_peak_kib() -> int:
    """This worker's peak resident memory in KiB: VmHWM (its own memory map) on Linux; ru_maxrss elsewhere, which
    on Linux would start at the parent's high-water mark (fork + exec keeps it)."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
