"""`python -m vit_keras.demo` exactly as `make demo` runs it: every stage, the 95% bar, exit status 0."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env():
    # This checkout's code, whatever vit_keras the interpreter has installed.
    return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")


@pytest.mark.slow
def test_the_demo_runs_this_checkouts_code():
    found = subprocess.run([sys.executable, "-c", "import vit_keras.demo as d; print(d.__file__)"], cwd=ROOT,
                           env=_env(), capture_output=True, text=True, timeout=300, check=True)
    package = os.path.join(ROOT, "vit_keras", "demo", "__init__.py")
    assert os.path.realpath(found.stdout.strip()) == os.path.realpath(package)


@pytest.mark.slow
@pytest.mark.numerics
def test_demo_exits_zero_end_to_end(tmp_path, record_property):
    output_dir = tmp_path / "demo_output"
    run = subprocess.run([sys.executable, "-m", "vit_keras.demo", "--output-dir", str(output_dir)], cwd=ROOT,
                         env=_env(), capture_output=True, text=True, timeout=1800)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    line = re.search(r"held-out accuracy: ([0-9.]+)% top-1, ([0-9.]+)% top-5 on 360 digits.*passes the 95% bar",
                     run.stdout)
    assert line, run.stdout[-4000:]
    record_property("held_out_top1_percent", float(line.group(1)))
    record_property("bound:held_out_top1_percent", ">= 95.0")
    # The demo's own bar (it exits 1 below it), not a bound fitted to a run. Its spread is in docs/fine-tuning.md
    # ("The demo"): 10 runs
    # (5 seeds x 1 and 2 threads) from 96.39% to 98.33%, so the bar allows only 1.4x the worst error measured;
    # `make test-numerics` leaves this test out (a whole demo per setting), add it with
    # `python scripts/test_numerics.py -- tests/test_demo_end_to_end.py`.
    assert float(line.group(1)) >= 95.0
    assert "reloaded with safe_mode=True: identical predictions" in run.stdout
    for path in ("vit_digits.keras", "finetune/checkpoints/best.keras", "pretrain/checkpoints/last.keras",
                 "export/vit_float32.tflite", "inspection/attention_maps.png", "finetune/results.json"):
        assert (output_dir / path).is_file(), path
