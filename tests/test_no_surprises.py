"""No silent surprises: integer checkpoint tensors, predictions of an untrained model, and files overwritten
without being asked."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import save_file

import vit_keras
from tests.tiny import TINY
from vit_keras import export
from vit_keras.cli import main
from vit_keras.weights import safetensors_io

FIXTURE_NPZ = os.path.join(os.path.dirname(__file__), "fixtures", "vitjax_token_raw", "checkpoint.npz")


# ---------------------------------------------------------------- safetensors dtypes


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
def test_integer_or_bool_weights_in_safetensors_are_refused(tmp_path, dtype):
    path = str(tmp_path / "vit.safetensors")
    save_file({"patch_embed.proj.weight": np.zeros((48, 3, 8, 8), np.float32),
               "blocks.0.norm1.weight": np.ones(48, np.float32),
               "head.weight": np.ones((5, 48), dtype)}, path)
    with pytest.raises(ValueError, match=rf"vit.safetensors': tensor 'head.weight' has dtype "
                                         rf"{np.dtype(dtype)}; expected floating-point weights"):
        vit_keras.ViT(image_size=32, classes=5, weights=path, **TINY)


def test_integer_index_buffers_are_not_weights_and_pass(tmp_path):
    path = str(tmp_path / "model.safetensors")
    save_file({"embeddings.position_ids": np.arange(5, dtype=np.int64)[None],
               "embeddings.patch_embeddings.projection.weight": np.zeros((48, 3, 8, 8), np.float16)}, path)
    tensors = safetensors_io.read_safetensors(path)
    assert tensors["embeddings.position_ids"].dtype == np.int64
    assert tensors["embeddings.patch_embeddings.projection.weight"].dtype == np.float32


# ---------------------------------------------------------------- vit-keras predict without weights


@pytest.fixture
def image_file(tmp_path):
    path = str(tmp_path / "noise.png")
    tf.io.write_file(path, tf.io.encode_png(np.random.default_rng(0).integers(0, 256, (40, 50, 3), np.uint8)))
    return path


def test_predict_without_weights_is_refused(image_file, capsys):
    assert main(["predict", image_file, "--model", "Ti/16", "--image-size", "32"]) == 2
    captured = capsys.readouterr()
    assert "no --weights given" in captured.err and "--random-weights" in captured.err and captured.out == ""


@pytest.mark.slow
def test_predict_with_random_weights_runs_and_warns(image_file, capsys):
    assert main(["predict", image_file, "--model", "Ti/16", "--image-size", "32", "--random-weights",
                 "--top", "2"]) == 0
    captured = capsys.readouterr()
    assert "untrained" in captured.err
    assert captured.out.splitlines()[0] == image_file and len(captured.out.splitlines()) == 3
    assert main(["predict", image_file, "--random-weights", "--weights", "imagenet"]) == 2
    assert "contradict" in capsys.readouterr().err


# ---------------------------------------------------------------- existing files are kept unless --overwrite


def _leftovers(directory, keep):
    return sorted(name for name in os.listdir(directory) if name not in keep)


@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_convert_refuses_an_existing_destination_unless_overwrite(tmp_path, capsys, suffix):
    destination = tmp_path / f"vit{suffix}"
    destination.write_bytes(b"precious")
    assert main(["convert", FIXTURE_NPZ, str(destination)]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert destination.read_bytes() == b"precious"
    assert main(["convert", FIXTURE_NPZ, str(destination), "--overwrite"]) == 0
    assert destination.read_bytes() != b"precious" and _leftovers(tmp_path, {destination.name}) == []


def test_convert_that_fails_while_writing_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, capsys):
    import keras

    destination = tmp_path / "vit.weights.h5"
    destination.write_bytes(b"precious")

    def fail_halfway(self, path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"half")
        raise ValueError("disk full")

    monkeypatch.setattr(keras.Model, "save_weights", fail_halfway)
    assert main(["convert", FIXTURE_NPZ, str(destination), "--overwrite"]) == 2
    assert "disk full" in capsys.readouterr().err
    assert destination.read_bytes() == b"precious" and _leftovers(tmp_path, {destination.name}) == []


@pytest.fixture(scope="module")
def tiny_model():
    return vit_keras.ViT(image_size=32, classes=5, **TINY)


@pytest.mark.slow
def test_tflite_refuses_an_existing_file_unless_overwrite(tiny_model, tmp_path):
    path = tmp_path / "vit.tflite"
    path.write_bytes(b"precious")
    with pytest.raises(ValueError, match="vit.tflite already exists; pass overwrite=True"):
        export.tflite(tiny_model, path)
    assert path.read_bytes() == b"precious"
    export.tflite(tiny_model, path, overwrite=True)
    assert path.read_bytes()[4:8] == b"TFL3" and _leftovers(tmp_path, {"vit.tflite"}) == []


@pytest.mark.slow
def test_tflite_that_fails_leaves_no_file(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr(export.lite, "non_builtin_operators", lambda flatbuffer: ["FlexSomething"])
    with pytest.raises(RuntimeError, match="non-builtin ops"):
        export.tflite(tiny_model, tmp_path / "vit.tflite")
    assert os.listdir(tmp_path) == []


def test_export_cli_refuses_an_existing_tflite_before_converting(tmp_path, capsys):
    path = tmp_path / "vit.tflite"
    path.write_bytes(b"precious")
    args = ["export", str(path), "--format", "tflite", "--model", "Ti/16", "--image-size", "32"]
    assert main(args) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err and path.read_bytes() == b"precious"
