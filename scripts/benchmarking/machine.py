"""The machine a run measures: its CPU, flags and GPUs, the class that names its results file, and that file's
default path under benchmarks/."""

from __future__ import annotations

import datetime
import os
import platform
import re
import sys

from .settings import REPO


def gpu_names() -> list:
    """The names of the GPUs TensorFlow sees, or, where it sees none (a CPU-only TensorFlow, or none at all), those
    PyTorch sees, or JAX."""
    names = []
    try:
        import tensorflow as tf

        for gpu in tf.config.list_physical_devices("GPU"):
            names.append(tf.config.experimental.get_device_details(gpu).get("device_name") or gpu.name)
    except ImportError:  # pragma: no cover
        pass
    if names:
        return names
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    try:  # a JAX-only install
        import jax

        return [device.device_kind for device in jax.devices("gpu")]
    except (ImportError, RuntimeError):  # no JAX, or no GPU backend
        return []


def machine_description() -> dict:
    """The CPU model and matmul-relevant flags (see vit_keras.hardware), the GPUs, core count and library versions."""
    sys.path.insert(0, REPO)
    from vit_keras import hardware

    detected = hardware.Machine(hardware.cpu_info(), hardware.gpu_capabilities())
    import keras

    described = {"platform": platform.platform(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
                 "python": platform.python_version(), **hardware.summary(detected), "gpus": gpu_names(),
                 "keras_backend": keras.backend.backend(), "load_average": list(os.getloadavg())}
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return described
    for package in ("tensorflow-cpu", "tensorflow", "keras", "jax", "jaxlib", "torch", "timm", "onnxruntime",
                    "keras-hub"):
        try:
            described.setdefault("versions", {})[package] = version(package)
        except PackageNotFoundError:
            pass
    return described


# The instruction-set class that decides float32 / bfloat16 matmul speed on a CPU, most capable first.
ISA_CLASSES = (("amx", ("amx_bf16", "amx_tile")), ("avx512bf16", ("avx512_bf16",)), ("avx512", ("avx512f",)),
               ("avx2", ("avx2",)), ("sve", ("sve",)), ("neon-bf16", ("bf16",)))


def _slug(text: str) -> str:
    words = re.sub(r"\((r|tm)\)|\b(cpu|processor|\d+-core)\b|@.*$", " ", text.lower())
    return "-".join(re.findall(r"[a-z0-9]+", words))


def machine_class(machine: dict) -> str:
    """The machine in a few words for a file name: CPU model, its matmul instruction class, and the first GPU.

    Example:
        >>> machine_class({"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "gpus": []})
        'amd-epyc-avx2'
        >>> machine_class({"cpu_model": "Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.0GHz",
        ...                "cpu_flags": ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"],
        ...                "gpus": ["NVIDIA H100 80GB HBM3"]})
        'intel-xeon-platinum-8480-amx-nvidia-h100-80gb-hbm3'
    """
    flags = set(machine.get("cpu_flags") or ())
    isa = next((name for name, needs in ISA_CLASSES if flags & set(needs)), None)
    parts = [_slug(machine.get("cpu_model") or "") or _slug(platform.machine()) or "cpu", isa]
    parts += [_slug(machine["gpus"][0])] if machine.get("gpus") else []
    return "-".join(part for part in parts if part)


def machine_line(machine: dict) -> str:
    """The machine as the report's first line names it: CPU model and flags, core count, GPUs, Python.

    Example:
        >>> machine_line({"cpu_model": "AMD EPYC", "cpu_flags": ["avx2", "fma"], "cpu_count": 2, "gpus": [],
        ...               "python": "3.11.9"})
        'AMD EPYC (avx2, fma; no AVX-512, avx512_bf16 or AMX), 2 CPUs, no GPU, Python 3.11.9'
    """
    flags = machine.get("cpu_flags") or []
    missing = [name for name, flag in (("AVX-512", "avx512f"), ("avx512_bf16", "avx512_bf16"), ("AMX", "amx_tile"))
               if flag not in flags]
    shown = ", ".join(flags) or "flags unknown"
    if missing and "avx2" in flags:
        shown += f"; no {', '.join(missing[:-1])}{' or ' if len(missing) > 1 else ''}{missing[-1]}"
    gpus = machine.get("gpus") or []
    gpu = f"{len(gpus)} GPU{'s' if len(gpus) > 1 else ''}: {', '.join(gpus)}" if gpus else "no GPU"
    return (f"{machine.get('cpu_model') or platform.machine()} ({shown}), {machine.get('cpu_count')} CPUs, {gpu}, "
            f"Python {machine.get('python')}")


def default_json_path(machine: dict, suite: str, precisions, dinov3=False, quick=False, day=None) -> str:
    """Where a run's JSON goes unless `--json` names a file: `benchmarks/<date>-<machine class>-<suite>-<precisions>`
    (`-dinov3`, `-quick` when set), so that runs on other days, machines or suites never overwrite each other.

    Example:
        >>> default_json_path({"cpu_model": "AMD EPYC", "cpu_flags": ["avx2"]}, "inference", ["float32"],
        ...                   day=datetime.date(2026, 11, 26)).split(os.sep)[-2:]
        ['benchmarks', '2026-11-26-amd-epyc-avx2-inference-float32.json']
    """
    day = day or datetime.date.today()
    parts = [day.isoformat(), machine_class(machine), suite, *precisions]
    parts += ["dinov3"] if dinov3 else []
    parts += ["quick"] if quick else []
    return os.path.join(REPO, "benchmarks", "-".join(parts) + ".json")
