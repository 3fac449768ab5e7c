"""The dense task reference cases (tests/fixtures/tasks, made with transformers: see its README) and their measure,
written once for the tests on every backend.

Tolerance: per output, max |got - want| / max(1, max |want|) <= 1e-4 in float32, the fixtures' own bound: their
README measures the float32 noise floor (the same weights in float64, or with transformers' other attention path)
at <= 1.0e-6, 100x below it, and every mistake it lists but the LayerNorm-eps and GELU-form ones at >= 1.7e-3."""

import json
import os

import keras
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tasks")
CASES = ("eomt", "depth_anything", "vitpose_simple")
RELATIVE_TOLERANCE = 1e-4


def case_dir(case: str) -> str:
    return os.path.join(FIXTURES, case)


def checkpoint(case: str) -> str:
    with open(os.path.join(case_dir(case), "meta.json")) as f:
        return os.path.join(case_dir(case), json.load(f)["checkpoint"])


def inputs(case: str) -> np.ndarray:
    return np.load(os.path.join(case_dir(case), "input.npy"))


def expected(case: str) -> dict:
    with np.load(os.path.join(case_dir(case), "expected.npz")) as arrays:
        return {name: arrays[name] for name in arrays.files}


def relative_errors(found, want: dict) -> dict:
    """Per output: max |found - want| / max(1, max |want|); a shape mismatch is infinite."""
    errors = {}
    for name, reference in want.items():
        got = np.asarray(keras.ops.convert_to_numpy(found[name]), np.float64)
        errors[name] = (float(np.abs(got - reference).max() / max(1.0, np.abs(reference).max()))
                        if got.shape == reference.shape else float("inf"))
    return errors
