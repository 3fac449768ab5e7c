"""Execute notebooks/masked_patch.ipynb from top to bottom with a few pre-training steps."""

from __future__ import annotations

import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "masked_patch.ipynb"


@pytest.mark.slow
def test_masked_patch_notebook_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setenv("VIT_KERAS_NOTEBOOK_STEPS", "6")
    monkeypatch.setenv("VIT_KERAS_REPO", str(ROOT))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=300, startup_timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert [o for o in outputs if "image/png" in o.get("data", {})]  # the figure of corrupted inputs
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "6 updates" in text and "'resampled': True" in text
    assert "few-shot probe, masked patch" in text
    # The experiment's recorded results, both tables (docs/masked_patch*_results.json).
    assert "class token, the paper's setting" in text and "mean patch token, the three targets" in text
    assert "finetuned_mean_colour" in text
