"""Run the numerics-sensitive tests (`-m numerics`) once under each setting that changes float arithmetic, and
print, per bound, the spread measured across the settings next to the bound and its margin.

A bound measured on one machine is not a bound: oneDNN picks kernels by instruction set (AVX-512 and AMX change
summation order and blocking), TensorFlow and TFLite split reductions by thread count, and TFLite runs either the
XNNPACK delegate or its builtin kernels. The settings below reproduce those differences on one machine where they
can: an instruction-set cap at or above what this CPU has changes nothing, and is logged as such, not run.

Each test records what it measured with `record_property(name, value)` and, for an asserted quantity, the bound as
`record_property("bound:" + name, "< 0.0001")` (or `">= 0.99"`); they land in the JUnit XML this script reads.
Margin, per setting, the smallest shown: bound / value for an upper bound; for a lower bound on a fraction
(agreement, accuracy), the allowed shortfall over the measured one, (1 - bound) / (1 - value), or out of
100 for a percentage.

    python scripts/test_numerics.py                   # every setting, table to stdout and numerics_report.md
    python scripts/test_numerics.py --settings default,onednn_off -- -k agreement
    python scripts/test_numerics.py --files tests/test_family2_export.py
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_FILES = ["tests/test_export.py", "tests/test_quantization.py", "tests/test_precision.py",
              "tests/test_onnx_export.py", "tests/test_training_demo.py", "tests/test_family2.py",
              "tests/test_family2_hf.py", "tests/test_family2_radio.py", "tests/test_family2_export.py",
              "tests/test_naflex.py", "tests/test_naflex_forms.py", "tests/test_naflex_training.py"]
# oneDNN's instruction-set caps from lowest to highest, and the /proc/cpuinfo flag each one needs.
ISA_ORDER = [("SSE41", "sse4_1"), ("AVX", "avx"), ("AVX2", "avx2"), ("AVX512_CORE", "avx512f"),
             ("AVX512_CORE_AMX", "amx_tile")]


@dataclass
class Setting:
    name: str
    env: dict
    what: str
    isa: str | None = None


SETTINGS = [
    Setting("default", {}, "defaults (oneDNN at the CPU's best ISA, TFLite XNNPACK)"),
    Setting("isa_avx512_core", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, "oneDNN capped at AVX-512 (no AMX)",
            "AVX512_CORE"),
    Setting("isa_avx2", {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "oneDNN capped at AVX2", "AVX2"),
    Setting("isa_avx", {"ONEDNN_MAX_CPU_ISA": "AVX"}, "oneDNN capped at AVX", "AVX"),
    Setting("isa_sse41", {"ONEDNN_MAX_CPU_ISA": "SSE41"}, "oneDNN capped at SSE4.1", "SSE41"),
    Setting("onednn_off", {"TF_ENABLE_ONEDNN_OPTS": "0"}, "oneDNN off (TensorFlow's Eigen kernels)"),
    Setting("tflite_builtin", {"VIT_KERAS_TFLITE_XNNPACK": "0"}, "TFLite builtin kernels, no XNNPACK delegate"),
    Setting("threads_1", {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "1",
                          "VIT_KERAS_TFLITE_THREADS": "1"}, "1 thread (TensorFlow, oneDNN/OpenMP, TFLite)"),
    Setting("threads_2", {"TF_NUM_INTRAOP_THREADS": "2", "OMP_NUM_THREADS": "2", "VIT_KERAS_TFLITE_THREADS": "2"},
            "2 threads (TensorFlow, oneDNN/OpenMP, TFLite)"),
]


def cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def best_isa(flags: set) -> str | None:
    best = None
    for isa, flag in ISA_ORDER:
        if flag in flags:
            best = isa
    return best


def is_noop(setting: Setting, flags: set) -> bool:
    """A cap at or above the CPU's best instruction set leaves oneDNN's choice unchanged."""
    if setting.isa is None or not flags:
        return False
    names = [isa for isa, _ in ISA_ORDER]
    best = best_isa(flags)
    return best is not None and names.index(setting.isa) >= names.index(best)


@dataclass
class Result:
    setting: str
    passed: int = 0
    failed: list = field(default_factory=list)
    values: dict = field(default_factory=dict)  # (test, property) -> float
    bounds: dict = field(default_factory=dict)  # (test, property) -> "< x" / ">= x"


def run_setting(setting: Setting, python: str, pytest_args: list, workdir: str, files=TEST_FILES) -> Result:
    xml_path = os.path.join(workdir, f"{setting.name}.xml")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"), **setting.env}
    command = [python, "-m", "pytest", "-q", "-m", "numerics", "-p", "no:cacheprovider", "--junitxml", xml_path,
               *files, *pytest_args]
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    result = Result(setting.name)
    if not os.path.exists(xml_path):
        result.failed.append(f"pytest wrote no report (exit {completed.returncode}): {completed.stderr[-2000:]}")
        return result
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        test = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        problems = [child for child in case if child.tag in ("failure", "error")]
        if problems:
            result.failed.append(f"{test}: {(problems[0].get('message') or '')[:300]}")
        elif not any(child.tag == "skipped" for child in case):
            result.passed += 1
        for prop in case.iter("property"):
            name, value = prop.get("name"), prop.get("value")
            if name.startswith("bound:"):
                result.bounds[(test, name[len("bound:"):])] = value
            else:
                try:
                    result.values[(test, name)] = float(value)
                except (TypeError, ValueError):
                    pass
    if completed.returncode != 0 and not result.failed:
        result.failed.append(f"pytest exited {completed.returncode}: {completed.stdout[-2000:]}")
    return result


def margin(bound: str, value: float) -> float:
    """How many times over the measured value the bound is (inf where the value sits exactly on a perfect score)."""
    op, _, number = bound.partition(" ")
    limit = float(number)
    if op in ("<", "<="):
        return math.inf if value == 0 else limit / value
    whole = 100.0 if limit > 1.0 else 1.0  # a lower bound on a fraction, or on a percentage
    shortfall = whole - value
    return math.inf if shortfall <= 0 else (whole - limit) / shortfall


def table(results: list) -> list:
    keys = sorted({key for result in results for key in result.values})
    lines = ["| test | quantity | min | max | bound | margin (worst setting) | settings |",
             "|---|---|---:|---:|---|---:|---:|"]
    for key in keys:
        values = [r.values[key] for r in results if key in r.values]
        bounded = [(r.bounds[key], r.values[key]) for r in results if key in r.bounds and key in r.values]
        low, high = min(values), max(values)
        if bounded:
            bounds = sorted({bound for bound, _ in bounded})
            bound = bounds[0] if len(bounds) == 1 else f"{bounds[0]} .. {bounds[-1]} (per run)"
            worst = min(margin(b, v) for b, v in bounded)
            shown_margin = "exact" if math.isinf(worst) else f"{worst:.1f}x"
        else:
            bound, shown_margin = "reported only", ""
        test, quantity = key
        lines.append(f"| {test} | {quantity} | {low:.4g} | {high:.4g} | {bound} | {shown_margin} | {len(values)} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", help="comma-separated setting names (default: all); "
                        + ", ".join(s.name for s in SETTINGS))
    parser.add_argument("--report", default=os.path.join(ROOT, "numerics_report.md"), help="markdown log file")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs pytest")
    parser.add_argument("--all", action="store_true", help="run instruction-set caps this CPU cannot change too")
    parser.add_argument("--files", help="comma-separated test files (default: " + ", ".join(TEST_FILES) + ")")
    args, pytest_args = parser.parse_known_args(argv)
    pytest_args = [a for a in pytest_args if a != "--"]
    files = [f.strip() for f in args.files.split(",") if f.strip()] if args.files else TEST_FILES
    missing = [f for f in files if not os.path.exists(os.path.join(ROOT, f))]
    if missing:
        parser.error(f"--files: no such test file {missing} (paths relative to {ROOT})")
    chosen = SETTINGS
    if args.settings:
        wanted = args.settings.split(",")
        unknown = sorted(set(wanted) - {s.name for s in SETTINGS})
        if unknown:
            parser.error(f"unknown --settings {unknown}; choose from {[s.name for s in SETTINGS]}")
        chosen = [s for s in SETTINGS if s.name in wanted]

    flags = cpu_flags()
    log = []

    def say(line=""):
        print(line, flush=True)
        log.append(line)

    say("# Numerics across arithmetic settings")
    say()
    say(f"CPU: {cpu_name()} (best oneDNN ISA: {best_isa(flags)}); {os.cpu_count()} logical CPUs; "
        f"Python {platform.python_version()}")
    say()

    results = []
    with tempfile.TemporaryDirectory(prefix="numerics-") as workdir:
        for setting in chosen:
            env_text = " ".join(f"{k}={v}" for k, v in setting.env.items()) or "(no variables)"
            if is_noop(setting, flags) and not args.all:
                say(f"- {setting.name}: {env_text}: skipped, a no-op on this CPU (its best ISA is "
                    f"{best_isa(flags)}, the cap {setting.isa} is not below it); it runs where the CPU has more")
                continue
            start = time.monotonic()
            result = run_setting(setting, args.python, pytest_args, workdir, files)
            results.append(result)
            status = "ok" if not result.failed else f"FAILED ({len(result.failed)})"
            say(f"- {setting.name}: {env_text} ({setting.what}): {result.passed} passed, {status}, "
                f"{time.monotonic() - start:.0f} s")
            for failure in result.failed:
                say(f"    - {failure}")
    say()
    for line in table(results):
        say(line)
    failed = [r.setting for r in results if r.failed]
    say()
    say(f"settings failing: {', '.join(failed)}" if failed else f"every setting passed ({len(results)} run)")
    report = args.report
    tmp = report + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(log) + "\n")
    os.replace(tmp, report)
    print(f"written to {report}")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
