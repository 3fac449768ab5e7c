"""`vit-keras predict` classifies image files with a model built from flags and saved weights."""

import numpy as np
import pytest
import tensorflow as tf

import vit_keras
from tests.reference_numpy import randomize_weights
from vit_keras.cli import main


def test_predict_prints_the_top_classes(tmp_path, capsys):
    model = vit_keras.ViTTi16(image_size=32, classes=1000, classifier_activation=None)
    randomize_weights(model, seed=0)
    weights = str(tmp_path / "ti16.weights.h5")
    model.save_weights(weights)
    image = np.random.default_rng(0).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    path = str(tmp_path / "noise.png")
    tf.io.write_file(path, tf.io.encode_png(image))

    code = main(["predict", path, "--model", "Ti/16", "--image-size", "32", "--weights", weights, "--top", "3"])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == path and len(lines) == 4
    # The printed best class is the model's own argmax on the resized image (softmax head, same weights).
    probs = vit_keras.ViTTi16(image_size=32, weights=weights).predict_on_batch(
        tf.image.resize(tf.cast(image, tf.float32), (32, 32))[None].numpy()
    )
    best = vit_keras.decode_predictions(probs, top=1)[0][0]
    assert lines[1].split()[-1] == best[1]
    assert float(lines[1].split()[0]) == pytest.approx(best[2], abs=1e-4)  # the CLI prints 4 decimals


def test_predict_reports_a_missing_file(tmp_path, capsys):
    code = main(["predict", str(tmp_path / "nope.jpg"), "--model", "Ti/16", "--image-size", "32"])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err
