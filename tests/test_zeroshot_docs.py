"""docs/zeroshot.md's Python examples run as written, in order, in one namespace (on the bundled reference
checkpoints), and what they print is what their comments say."""

import contextlib
import io
import os
import re

import keras
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "zeroshot.md")


def _blocks():
    with open(PAGE, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the page's export example runs on TensorFlow")
def test_zeroshot_page_examples_run(tmp_path, monkeypatch):
    os.symlink(os.path.join(ROOT, "tests"), tmp_path / "tests")
    monkeypatch.chdir(tmp_path)
    blocks = _blocks()
    assert len(blocks) >= 6
    namespace: dict = {}
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, PAGE, "exec"), namespace)  # noqa: S102 (the page's own examples)
        printed = out.getvalue().splitlines()
        claims = [line.split("#", 1)[1].split(":")[0].strip() for line in block.splitlines()
                  if line.startswith("print(") and "#" in line]
        assert len(printed) == len(claims), (printed, claims)
        for line, claim in zip(printed, claims):
            assert line == claim, (line, claim)
    assert os.path.isdir(tmp_path / "zeroshot_clip_savedmodel")
