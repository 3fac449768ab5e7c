"""scripts/benchmark.py keeps working: every case runs in its own process and the report compares like with like.

No wall-clock time is asserted: a throughput only has to be a positive number. What is asserted is that the
peers are the same network (equal parameter counts with timm, an independent implementation) and that the table
computes its ratios against vit_keras.
"""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "benchmark.py")


def _run(tmp_path, *arguments):
    path = tmp_path / "results.json"
    process = subprocess.run([sys.executable, SCRIPT, "--quick", "--json", str(path), *arguments],
                             capture_output=True, text=True, timeout=600)
    assert process.returncode == 0, process.stderr[-2000:]
    return json.loads(path.read_text()), process.stdout


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["inference", "training"])
def test_quick_benchmark_measures_vit_keras_and_timm_on_the_same_network(tmp_path, suite):
    results, report = _run(tmp_path, "--suite", suite, "--libraries", "vit_keras,timm", "--batch-sizes", "2",
                           "--precisions", "float32", "--xla", "on")
    by_library = {row["library"]: row for row in results}
    assert set(by_library) == {"vit_keras", "timm"}, results
    for row in results:
        assert "skipped" not in row, row
        assert row["images_per_s"] > 0 and row["peak_rss_mib"] > 0
    # Same architecture, written independently: the parameter counts must agree to the parameter.
    assert by_library["vit_keras"]["parameters"] == by_library["timm"]["parameters"]
    ratio = by_library["vit_keras"]["images_per_s"] / by_library["timm"]["images_per_s"]
    assert f"| {ratio:.2f} |" in report


def test_a_missing_peer_is_reported_as_skipped(tmp_path):
    results, report = _run(tmp_path, "--libraries", "vit-keras-0.2.0", "--batch-sizes", "1", "--precisions",
                           "float32", "--vit-keras-0.2.0-path", str(tmp_path / "absent"))
    assert len(results) == 1 and "skipped" in results[0]
    assert "skipped" in report


def test_unknown_library_is_refused():
    process = subprocess.run([sys.executable, SCRIPT, "--libraries", "vit_keras,tensorflow_models"],
                             capture_output=True, text=True, timeout=120)
    assert process.returncode == 2
    assert "unknown libraries ['tensorflow_models']" in process.stderr
