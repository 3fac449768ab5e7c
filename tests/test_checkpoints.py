"""best.keras and last.keras: atomic writes, the score kept inside the file, and reruns that never make it worse."""

import hashlib
import logging
import os
import zipfile

import keras
import numpy as np
import pytest

from vit_keras import training
from vit_keras.training import callbacks as cb


def _model(kernel=1.0):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, name="dense")])
    model.compile(optimizer="sgd", loss="mse")
    model.get_layer("dense").kernel.assign(np.full((2, 1), kernel, np.float32))
    return model


def _kernel(path):
    return float(keras.models.load_model(path, safe_mode=True).get_layer("dense").kernel.numpy()[0, 0])


def _digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _best(tmp_path, model, monitor="val_accuracy", mode="max"):
    best, last = training.checkpoint_callbacks(str(tmp_path / "checkpoints"), monitor, mode)
    for callback in (best, last):
        callback.set_model(model)
    return best, last


def test_score_travels_inside_an_ordinary_keras_file(tmp_path):
    model = _model(2.0)
    best, _ = _best(tmp_path, model)
    best.on_epoch_end(0, {"val_accuracy": 0.75})
    path = tmp_path / "checkpoints" / "best.keras"
    assert cb.checkpoint_score(str(path)) == {"monitor": "val_accuracy", "mode": "max", "value": 0.75, "epoch": 1}
    assert _kernel(path) == 2.0  # keras.models.load_model(safe_mode=True) ignores the extra entry
    assert cb.checkpoint_score(str(tmp_path / "missing.keras")) is None
    assert not [name for name in os.listdir(path.parent) if name.startswith(".")]  # no temporary file left


def test_a_save_that_fails_midway_leaves_the_previous_best_intact(tmp_path, monkeypatch):
    model = _model(1.0)
    best, last = _best(tmp_path, model)
    best.on_epoch_end(0, {"val_accuracy": 0.5})
    last.on_epoch_end(0, {"loss": 1.0})
    paths = [tmp_path / "checkpoints" / name for name in ("best.keras", "last.keras")]
    before = [_digest(path) for path in paths]

    real_save = keras.Model.save

    def save_then_die(self, filepath, *args, **kwargs):
        real_save(self, filepath, *args, **kwargs)
        with open(filepath, "r+b") as handle:  # half the bytes are on disk when the process dies
            handle.truncate(os.path.getsize(filepath) // 2)
        raise KeyboardInterrupt("killed during the write")

    monkeypatch.setattr(keras.Model, "save", save_then_die)
    model.get_layer("dense").kernel.assign(np.full((2, 1), 9.0, np.float32))
    with pytest.raises(KeyboardInterrupt):
        best.on_epoch_end(1, {"val_accuracy": 0.9})
    with pytest.raises(KeyboardInterrupt):
        last.on_epoch_end(1, {"loss": 0.5})
    monkeypatch.undo()
    assert [_digest(path) for path in paths] == before
    assert _kernel(paths[0]) == 1.0 and _kernel(paths[1]) == 1.0
    assert best.best == 0.5  # the failed save did not count as the new best
    assert not [name for name in os.listdir(paths[0].parent) if name.startswith(".")]


def test_a_rerun_replaces_best_only_when_strictly_better_and_says_so(tmp_path, caplog):
    path = tmp_path / "checkpoints" / "best.keras"
    first, _ = _best(tmp_path, _model(1.0))
    first.on_epoch_end(0, {"val_accuracy": 0.9})

    # A second run into the same directory (a new process: fresh callbacks) with worse and equal epochs.
    with caplog.at_level(logging.INFO, logger=cb.__name__):
        second, _ = _best(tmp_path, _model(2.0))
        assert second.best == 0.9 and second.earlier_best == 0.9
        second.on_epoch_end(0, {"val_accuracy": 0.6})
        second.on_epoch_end(1, {"val_accuracy": 0.9})
        second.on_epoch_end(2, {"val_accuracy": float("nan")})
    assert _kernel(path) == 1.0 and cb.checkpoint_score(str(path))["value"] == 0.9
    assert "0.9 from an earlier run" in caplog.text and "does not beat 0.9" in caplog.text
    assert "kept: val_accuracy 0.9 from an earlier run; this run's best was 0.9" in second.summary()

    third, _ = _best(tmp_path, _model(3.0))
    third.on_epoch_end(0, {"val_accuracy": 0.95})
    assert _kernel(path) == 3.0 and third.best == 0.95
    assert "beating 0.9 from an earlier run" in third.summary()


def test_loss_mode_and_an_unscored_or_cut_best_keras(tmp_path):
    path = tmp_path / "checkpoints" / "best.keras"
    path.parent.mkdir()
    _model(4.0).save(path)  # written by something else: a model, but no score
    best, _ = _best(tmp_path, _model(5.0), monitor="val_loss", mode="min")
    assert best.best is None
    best.on_epoch_end(0, {"val_loss": 0.3})
    best.on_epoch_end(1, {"val_loss": 0.4})
    assert _kernel(path) == 5.0 and best.best == 0.3
    assert _kernel(tmp_path / "checkpoints" / "best.previous.keras") == 4.0  # moved aside, not lost

    path.write_bytes(path.read_bytes()[:100])  # what a killed non-atomic write used to leave
    assert not zipfile.is_zipfile(path) and cb.checkpoint_score(str(path)) is None
    best, _ = _best(tmp_path, _model(6.0), monitor="val_loss", mode="min")
    best.on_epoch_end(0, {"val_loss": 0.8})
    assert _kernel(path) == 6.0


def test_last_checkpoint_never_stores_a_non_finite_epoch(tmp_path):
    model = _model(1.0)
    _, last = _best(tmp_path, model)
    last.on_epoch_end(0, {"loss": 0.5})
    model.get_layer("dense").kernel.assign(np.full((2, 1), np.nan, np.float32))
    last.on_epoch_end(1, {"loss": float("nan")})
    assert _kernel(tmp_path / "checkpoints" / "last.keras") == 1.0
