"""`python scripts/benchmark.py`: the arguments, the run of every case and the printed report."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

from .machine import default_json_path, machine_class, machine_description, machine_line
from .report import (
    attention_path_table,
    backend_table,
    flop_line,
    host_table,
    matmul_peaks,
    mfu_lines,
    naflex_table,
    setting_label,
    summarize,
    summary_table,
    table,
)
from .settings import BACKENDS, LIBRARIES, MULTI_BACKEND, PRECISIONS, REPO, RUNTIMES
from .suites import peak_cases, run_case, suite_cases, tensorflow_available
from .worker import worker

ATTENTION_CHOICES = ("auto", "einsum", "keras", "sdpa", "cudnn")


def _yes_no(text):
    return {"on": [True], "off": [False], "both": [False, True]}[text]


def _listed(text: str) -> list:
    return [name.strip() for name in text.split(",") if name.strip()]


def _parser() -> argparse.ArgumentParser:
    from . import __doc__ as description

    parser = argparse.ArgumentParser(description=description.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=description)
    parser.add_argument("--suite", choices=("inference", "training", "attention", "naflex"), default="inference")
    parser.add_argument("--libraries", default=",".join(LIBRARIES),
                        help=f"comma-separated, from {', '.join(LIBRARIES)} (default: all)")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help=f"comma-separated Keras backends for {' and '.join(MULTI_BACKEND)} (default: all)")
    parser.add_argument("--runtimes", default=",".join(RUNTIMES),
                        help="how vit_keras runs float32 inference: keras, and exported to tflite, tflite_int8 "
                        "(dynamic-range int8 weights) or onnxruntime (comma-separated; default: all)")
    parser.add_argument("--batch-sizes", default=None, help="comma-separated (default: 1,16; training: 8)")
    parser.add_argument("--precisions", default="float32,bfloat16", help="from float32, bfloat16, float16")
    parser.add_argument("--xla", choices=("on", "off", "both"), default="both",
                        help="XLA for the Keras libraries (default: both, and the faster one is their best)")
    parser.add_argument("--torch-compile", choices=("on", "off", "both"), default="both",
                        help="torch.compile the timm model (default: both, and the faster one is timm's best)")
    parser.add_argument("--inputs", default="device,host",
                        help="where each library's input batch lives: device (a tensor already on the device, a "
                        "compiled function of it) and host (NumPy in, as predict users do); comma-separated")
    parser.add_argument("--tf32", choices=("on", "off", "both"), default="both",
                        help="on a GPU, float32 matmuls in TF32 or full float32 for every library (default: both)")
    parser.add_argument("--attention", default="auto",
                        help="vit_keras' attention paths: auto (its own choice) and any of einsum, keras, sdpa, "
                        "cudnn forced through VIT_KERAS_ATTENTION, each a row of its own (comma-separated)")
    parser.add_argument("--matmul-size", type=int, default=None,
                        help="n of the n x n tf.matmul that measures the peak (default 2048; --quick 256; 0: skip)")
    parser.add_argument("--quick", action="store_true", help="a tiny model and short timings")
    parser.add_argument("--dinov3", action="store_true",
                        help="also DINOv3's ViT-B/16 (RoPE, registers, LayerScale) in vit_keras and timm")
    parser.add_argument("--min-seconds", type=float, default=None, help="time each case at least this long")
    parser.add_argument("--min-calls", type=int, default=None, help="and at least this many calls")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds before a case is given up")
    parser.add_argument("--vit-keras-0.2.0-path", dest="vit_keras_020_path",
                        default=os.path.join(REPO, ".venv-vitkeras020"),
                        help="a directory holding vit-keras 0.2.0 (pip install --target)")
    parser.add_argument("--json", default=None, help="write every measurement to this file (default: "
                        "benchmarks/<date>-<machine class>-<suite>-<precisions>.json)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return parser


def _resolve(args, parser) -> None:
    """The run's arguments as lists and settings, each checked: `parser.error` names a wrong one."""
    args.architecture = "tiny" if args.quick else "B/16"
    args.libraries = _listed(args.libraries)
    unknown = sorted(set(args.libraries) - set(LIBRARIES))
    if unknown:
        parser.error(f"unknown libraries {unknown}; choose from {', '.join(LIBRARIES)}")
    args.backends = _listed(args.backends)
    if not args.backends or set(args.backends) - set(BACKENDS):
        parser.error(f"--backends must come from {', '.join(BACKENDS)}, got {args.backends}")
    args.runtimes = _listed(args.runtimes)
    if not args.runtimes or set(args.runtimes) - set(RUNTIMES):
        parser.error(f"--runtimes must come from {', '.join(RUNTIMES)}, got {args.runtimes}")
    default_batches = "8" if args.suite in ("training", "naflex") else "1,16"
    args.batch_sizes = [int(b) for b in (args.batch_sizes or default_batches).split(",")]
    args.precisions = [p.strip() for p in args.precisions.split(",")]
    if set(args.precisions) - set(PRECISIONS):
        parser.error(f"precisions must come from {', '.join(PRECISIONS)}")
    args.xla = _yes_no(args.xla)
    args.torch_compile = _yes_no(args.torch_compile)
    if args.matmul_size is None:
        args.matmul_size = 256 if args.quick else 2048
    args.inputs = _listed(args.inputs)
    if not args.inputs or set(args.inputs) - {"device", "host"}:
        parser.error(f"--inputs must come from device, host, got {args.inputs}")
    args.attention = _listed(args.attention)
    if not args.attention or set(args.attention) - set(ATTENTION_CHOICES):
        parser.error(f"--attention must come from {', '.join(ATTENTION_CHOICES)}, got {args.attention}")


def _announce(args, machine: dict) -> None:
    """The machine's settings for this run, and the report's header lines."""
    args.gpu = bool(machine["gpus"])
    args.tf32 = _yes_no(args.tf32) if args.gpu else [None]  # TF32 is a GPU setting; a CPU has none
    args.peak_backend = "tensorflow" if tensorflow_available() else next(
        (name for name in ("jax", "torch") if importlib.util.find_spec(name)), "tensorflow")
    print(f"# {args.suite}: ViT-{args.architecture}; {machine_line(machine)}", flush=True)
    print(f"# machine class: {machine_class(machine)}", flush=True)
    if args.suite in ("inference", "training"):
        print(flop_line(args.architecture, args.suite), flush=True)
    for precision, reason in machine.get("attention", {}).items():
        print(f"# vit_keras attention on {machine.get('keras_backend')}, {precision}: {reason}", flush=True)
    if args.json is None:  # `--json ""` writes none
        args.json = default_json_path(machine, args.suite, args.precisions, args.dinov3, args.quick)
    if args.json:
        print(f"# measurements to {args.json}", flush=True)


def _result_line(case: dict, result: dict) -> str:
    if "skipped" in result:
        shown = result["skipped"]
    elif case["task"] == "matmul":
        shown = f"{result['gflop_per_s']:.1f} GFLOP/s"
    else:
        shown = f"{result['images_per_s']:.2f} images/s"
    label = case["library"] + (", DINOv3" if case.get("model") == "dinov3" else "") + (
        f", {case['image_set']}" if case["task"] == "naflex" else "")
    return f"  {label:<40} batch {case['batch']:>4} {case['precision']:<8} {setting_label(case):<13} {shown}"


def _measure(args) -> list:
    """Every case of the run, each in its own process, printed as it ends."""
    # The matmul peak is measured first and again last, and the faster counts: a slow spell of a shared machine
    # at either end then cannot make vit_keras' share of it look larger than it is.
    peaks = peak_cases(args) if args.matmul_size and args.suite not in ("attention", "naflex") else []
    results = []
    for case in peaks + suite_cases(args) + peaks:
        results.append(run_case(case, args))
        print(_result_line(case, results[-1]), flush=True)
    return results


def _ratio_lines(summary: list) -> list:
    """The ratios each summary row carries, one sentence each."""
    lines = []
    for row in summary:
        if "predict_vs_function" in row:
            lines.append(f"model.predict at batch {row['batch']} ({row['precision']}): "
                         f"{row['predict_vs_function']:.3f} x the compiled tf.function's images/s")
        if "dinov3_vs_vit" in row:
            costs = ", ".join(f"{library} {ratio:.3f}" for library, ratio in row["dinov3_vs_vit"].items())
            lines.append(f"DINOv3 at {row['task']} batch {row['batch']} ({row['precision']}): {costs} x the images/s "
                         "of the same library's ViT (RoPE, 4 registers, LayerScale)")
        for setting, fit in row.get("fit_vs_train_on_batch", {}).items():
            lines.append(f"model.fit at batch {row['batch']} ({row['precision']}, {setting}): {fit['ratio']:.3f} x "
                         f"the images/s of train_on_batch on a batch already on the device; input: "
                         f"{fit['input_path']}")
        if "head_tokens_only_gain" in row:
            lines.append(f"head_tokens_only at {row['task']} batch {row['batch']} ({row['precision']}, XLA): "
                         f"{row['head_tokens_only_gain']:.3f} x the images/s of computing every token of the last "
                         "block")
    return lines


def _print_report(results: list, summary: list) -> None:
    print()
    print(table(results))
    print()
    print(summary_table(summary, matmul_peaks(results)))
    for extra in (backend_table(summary), host_table(summary), attention_path_table(results),
                  "\n".join(mfu_lines(summary))):
        if extra:
            print()
            print(extra)
    for line in _ratio_lines(summary):
        print(line)


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    args.min_seconds = args.min_seconds if args.min_seconds is not None else (0.2 if args.quick else 10.0)
    args.min_calls = args.min_calls if args.min_calls is not None else (2 if args.quick else 3)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker), args.min_seconds, args.min_calls)))
        return 0
    _resolve(args, parser)
    machine = machine_description()
    _announce(args, machine)
    results = _measure(args)
    report = {"suite": args.suite, "architecture": args.architecture, "machine": machine}
    if args.suite == "naflex":
        print()
        print(naflex_table(results))
        report["results"] = results
    else:
        summary = summarize(results)
        _print_report(results, summary)
        report.update(matmul_peaks=matmul_peaks(results), summary=summary, results=results)
    if args.json:
        _write_json(args.json, report)
    return 0


def _write_json(path: str, report: dict) -> None:
    sys.path.insert(0, REPO)
    from vit_keras.files import atomic_file

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_file(path) as temporary, open(temporary, "w") as file:
        json.dump(report, file, indent=2)
