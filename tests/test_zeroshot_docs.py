"""docs/zeroshot.md's Python examples run as written, in order, in one namespace (on the bundled reference
checkpoints), those the site's build does not run included (training, the SavedModel export and its client); what
these print is what their comments say (what the others print is shown on the page: tests/test_docs_examples.py)."""

import contextlib
import io
import os
import re

import keras
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "zeroshot.md")


def _blocks():
    """(code, whether the site's build runs it) of each Python block."""
    with open(PAGE, encoding="utf-8") as f:
        found = re.findall(r"```python( exec)?\n(.*?)```", f.read(), flags=re.S)
    return [(code, info == " exec") for info, code in found]


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the page's export example runs on TensorFlow")
def test_zeroshot_page_examples_run(tmp_path, monkeypatch):
    os.symlink(os.path.join(ROOT, "tests"), tmp_path / "tests")
    monkeypatch.chdir(tmp_path)
    blocks = _blocks()
    assert len(blocks) >= 6
    namespace: dict = {}
    for block, shown in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, PAGE, "exec"), namespace)  # noqa: S102 (the page's own examples)
        if shown:
            continue
        printed = out.getvalue().splitlines()
        claims = [line.split("#", 1)[1].split(":")[0].strip() for line in block.splitlines()
                  if line.startswith("print(") and "#" in line]
        assert len(printed) == len(claims), (printed, claims)
        for line, claim in zip(printed, claims):
            assert line == claim, (line, claim)
    assert os.path.isdir(tmp_path / "zeroshot_clip_savedmodel")
