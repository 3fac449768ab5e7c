"""An asserted upper bound on a difference that also reports what it measured.

`make test-numerics` (scripts/test_numerics.py) runs the `numerics` tests once per arithmetic setting and reads what
each recorded with pytest's `record_property`: the largest value measured and the bound, so every bound appears in
its report beside the spread measured across the settings.
"""

import numpy as np


def relative_diff(out, reference):
    """max |out - reference| / max(1, max |reference|): absolute on outputs of magnitude <= 1, relative above."""
    out, reference = np.asarray(out, np.float64), np.asarray(reference, np.float64)
    assert out.shape == reference.shape, (out.shape, reference.shape)
    return float(np.abs(out - reference).max()) / max(1.0, float(np.abs(reference).max()))


class Bound:
    """Asserts `relative_diff(out, reference) <= bound` on each call and records the worst value so far under
    `name` (with `bound:<name>`) through `record_property`, when a test passes it.

    >>> close = Bound(1e-5, "relative_diff_alone")
    >>> close(np.array([1.0, 2.0]), np.array([1.0, 2.000001]))
    5e-07
    """

    def __init__(self, bound, name, record_property=None):
        self.bound, self.name, self.record = bound, name, record_property
        self.worst = 0.0

    def __call__(self, out, reference, what=""):
        difference = relative_diff(out, reference)
        assert difference <= self.bound, f"{what or self.name}: {difference:.3g} is over the bound {self.bound:g}"
        self.worst = max(self.worst, difference)
        if self.record is not None:
            # Recorded again on every call: the report keeps the last value, which is the worst.
            self.record(self.name, float(f"{self.worst:.3g}"))
            self.record("bound:" + self.name, f"<= {self.bound:g}")
        return float(f"{difference:.3g}")
