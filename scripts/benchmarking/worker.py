"""One case measured in this process (`benchmark.py --worker CASE`): the measurement its task and library
need, with the worker's peak memory and device."""

from __future__ import annotations

from .keras_runs import run_keras
from .kernels import run_attention, run_attention_path, run_matmul
from .naflex import run_naflex
from .peers import run_onnxruntime, run_timm
from .timing import Skipped, backend_device, own_peak_kib


def worker(case: dict, min_seconds: float, min_calls: int) -> dict:
    """Run one case in this process and return its measurements (or why it was skipped)."""
    try:
        if case["task"] == "attention" and case.get("attention_path"):
            result = run_attention_path(case, min_seconds, min_calls)
        elif case["task"] == "attention":
            result = run_attention(case, min_seconds, min_calls)
        elif case["task"] == "naflex":
            result = run_naflex(case, min_seconds, min_calls)
        elif case["task"] == "matmul":
            result = run_matmul(case, min_seconds, min_calls)
        elif case["library"] == "timm":
            result = run_timm(case, min_seconds, min_calls)
        elif case["library"] == "onnxruntime":
            result = run_onnxruntime(case, min_seconds, min_calls)
        else:
            result = run_keras(case, min_seconds, min_calls)
    except Skipped as reason:
        return {**case, "skipped": str(reason)}
    result["peak_rss_mib"] = own_peak_kib() / 1024
    result["device"] = result.pop("backend_device", None) or backend_device(
        "torch" if case["library"] in ("timm", "onnxruntime") else "tensorflow")
    return {**case, **result}
