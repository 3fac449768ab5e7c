"""scripts/test_numerics.py: which settings it runs on this CPU, and the margins and spreads it reports."""

import importlib.util
import math
import os
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "test_numerics.py")


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("test_numerics_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_margins_of_upper_and_lower_bounds(script):
    assert script.margin("< 1e-4", 2.5e-5) == pytest.approx(4.0)
    assert script.margin("< 1e-4", 0.0) == math.inf
    # A lower bound on a fraction: the allowed shortfall (12%) over the measured one (6%).
    assert script.margin(">= 0.88", 0.94) == pytest.approx(2.0)
    assert script.margin(">= 1.0", 1.0) == math.inf
    assert script.margin(">= 95.0", 97.5) == pytest.approx(2.0)  # a percentage


def test_an_isa_cap_at_or_above_the_cpus_best_is_a_no_op(script):
    avx2 = {"sse4_1", "avx", "avx2"}
    by_name = {setting.name: setting for setting in script.SETTINGS}
    assert script.best_isa(avx2) == "AVX2"
    assert script.is_noop(by_name["isa_avx2"], avx2) and script.is_noop(by_name["isa_avx512_core"], avx2)
    assert not script.is_noop(by_name["isa_avx"], avx2) and not script.is_noop(by_name["onednn_off"], avx2)
    amx = avx2 | {"avx512f", "amx_tile"}
    assert not script.is_noop(by_name["isa_avx512_core"], amx) and not script.is_noop(by_name["isa_avx2"], amx)


def test_table_shows_the_spread_the_bound_and_the_worst_margin(script):
    key = ("test_export::test_x", "top1_agreement_int8")
    reported = ("test_export::test_x", "max_abs_diff_int8")
    runs = []
    for setting, agreement, diff in [("default", 0.95, 0.46), ("onednn_off", 0.97, 0.5)]:
        result = script.Result(setting)
        result.values = {key: agreement, reported: diff}
        result.bounds = {key: ">= 0.88"}
        runs.append(result)
    rows = {line.split(" | ")[1]: line for line in script.table(runs)[2:]}
    assert rows["top1_agreement_int8"].endswith("| 0.95 | 0.97 | >= 0.88 | 2.4x | 2 |")  # 12% / 5%
    assert "| 0.46 | 0.5 | reported only |" in rows["max_abs_diff_int8"]
