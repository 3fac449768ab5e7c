"""`vit-keras export`: what it writes and what it prints, on a tiny .keras model."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

from tests.tiny import TINY
from vit_keras import ViT, export
from vit_keras.cli import SUBCOMMANDS, main


@pytest.fixture(scope="module")
def keras_file(tmp_path_factory):
    keras.utils.set_random_seed(0)
    model = ViT(image_size=32, classes=4, **{**TINY, "num_layers": 1})
    # The head is zero-initialised; random weights give the classes distinct scores to agree on.
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32"))
    path = tmp_path_factory.mktemp("cli") / "tiny.keras"
    model.save(path)
    return str(path)


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    import tensorflow as tf

    directory = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(1)
    for i in range(6):
        image = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
        tf.io.write_file(str(directory / f"{i}.png"), tf.io.encode_png(image))
    return str(directory)


def test_export_is_a_registered_subcommand():
    assert "export" in SUBCOMMANDS


@pytest.mark.slow
def test_cli_writes_a_saved_model_and_reports_agreement(keras_file, image_dir, tmp_path, capsys):
    names = tmp_path / "classes.txt"
    names.write_text("cat\ndog\nbird\nfish\n")
    base = tmp_path / "models" / "vit"
    argv = ["export", str(base), "--format", "saved_model", "--keras-model", keras_file, "--version", "3",
            "--class-names", str(names), "--check-images", image_dir]
    assert main(argv) == 0
    out = capsys.readouterr().out
    print(out)
    assert f"wrote SavedModel version 3 to {base / '3'}" in out and "MiB" in out
    assert "signature serving_default: images float32[None, 32, 32, 3] -> probabilities float32[None, 4]" in out
    assert "top_k_labels string[None, 4]" in out
    assert "signature serve_bytes: image_bytes string[None]" in out
    assert "agreement with the Keras model on the given images: top-1 100.00%" in out
    assert os.path.isfile(base / "3" / "saved_model.pb")

    # The same version again is refused with a message, not overwritten.
    assert main(argv) == 2
    assert "already exists; pass --overwrite (or another --version)" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0


@pytest.mark.slow
def test_an_existing_version_folder_is_refused_before_the_model_is_read_and_left_intact(tmp_path, capsys):
    version = tmp_path / "models" / "vit" / "1"
    (version / "data").mkdir(parents=True)
    (version / "thesis.txt").write_text("mine")
    # No model exists at all: the refusal comes first, before anything is read or written.
    assert main(["export", str(version.parent), "--format", "saved_model", "--keras-model",
                 str(tmp_path / "none.keras")]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert (version / "thesis.txt").read_text() == "mine" and (version / "data").is_dir()


def test_cli_writes_tflite_and_reports_agreement(keras_file, image_dir, tmp_path, capsys):
    path = tmp_path / "vit_int8.tflite"
    argv = ["export", str(path), "--format", "tflite", "--quantization", "int8", "--keras-model", keras_file,
            "--calibration-images", image_dir]
    assert main(argv) == 0
    out = capsys.readouterr().out
    print(out)
    assert f"wrote TFLite (int8) to {path}" in out and "no Flex ops" in out
    assert "agreement with the Keras model on 16 random images (pass --check-images for real ones): top-1" in out
    assert export.non_builtin_operators(str(path)) == []


def test_cli_int8_needs_calibration_images(keras_file, tmp_path, capsys):
    argv = ["export", str(tmp_path / "q.tflite"), "--format", "tflite", "--quantization", "int8",
            "--keras-model", keras_file]
    assert main(argv) == 2
    assert "needs --calibration-images" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "m"), "--format", "saved_model", "--keras-model", "missing.keras"]) == 2
    assert "does not exist" in capsys.readouterr().err
