"""Execute notebooks/inspection.ipynb from top to bottom, as a user would."""

from __future__ import annotations

import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "inspection.ipynb"


def test_inspection_notebook_runs(monkeypatch, tmp_path):
    # The kernel is a child process: make it import this checkout's vit_keras and stay quiet.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setenv("VIT_KERAS_NOTEBOOK_EPOCHS", "5")  # a few seconds of training is enough to run it all
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, startup_timeout=180, kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 6  # every figure cell drew its figure
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "held-out accuracy" in text
    assert "['attention_maps.png', 'attention_distance.png', 'position_embedding_similarity.png', " in text
