"""`.weights.h5` files load strictly and all or nothing: every missing, unexpected and mis-shaped array is listed
and the model is left exactly as it was."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import vit_keras
from tests.tiny import TINY
from vit_keras.weights import keras_h5


def _model(**changes):
    return vit_keras.ViT(**{"image_size": 16, "classes": 5, **TINY, **changes})


def _saved(tmp_path, name="saved", **changes):
    path = str(tmp_path / f"{name}.weights.h5")
    _model(**changes).save_weights(path)
    return path


def _assert_untouched(model, before):
    for variable, value in zip(model.weights, before):
        np.testing.assert_array_equal(variable.numpy(), value, err_msg=variable.path)


@pytest.mark.slow
def test_round_trip_loads_every_array(tmp_path):
    source = _model()
    path = str(tmp_path / "m.weights.h5")
    source.save_weights(path)
    target = vit_keras.load_weights(_model(), path)
    with h5py.File(path) as f:
        assert len(keras_h5.file_arrays(f)) == len(source.weights)
    for a, b in zip(source.weights, target.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    images = np.random.default_rng(0).uniform(0, 255, (2, 16, 16, 3)).astype(np.float32)
    np.testing.assert_array_equal(source.predict_on_batch(images), target.predict_on_batch(images))


def test_more_layers_in_the_file_are_refused(tmp_path):
    path = _saved(tmp_path, num_layers=3)
    model = _model()
    before = [w.numpy() for w in model.weights]
    with pytest.raises(ValueError, match=r"(?s)does not fit this model \(0 missing, 16 unexpected, 0 of another "
                                         r"shape\); nothing was loaded.*same arguments.*not in the model: "
                                         r"layers/transformer_block_2/attention/key_dense/vars/0 \(layer "
                                         r"'Transformer_encoderblock_2/MultiHeadDotProductAttention_1/key', "
                                         r"shape \(48, 3, 16\)\)"):
        vit_keras.load_weights(model, path)
    _assert_untouched(model, before)


def test_fewer_layers_in_the_file_assign_nothing(tmp_path):
    path = _saved(tmp_path, num_layers=1)
    model = _model()
    before = [w.numpy() for w in model.weights]
    with pytest.raises(ValueError, match=r"(?s)16 missing, 0 unexpected.*missing from the file: "
                                         r"layers/transformer_block_1/.*Transformer_encoderblock_1/"):
        vit_keras.load_weights(model, path)
    _assert_untouched(model, before)


def test_other_class_count_lists_the_head_and_assigns_nothing(tmp_path):
    path = _saved(tmp_path, classes=10)
    model = _model()
    before = [w.numpy() for w in model.weights]
    with pytest.raises(ValueError, match=r"(?s)0 missing, 0 unexpected, 2 of another shape.*"
                                         r"shape differs: layers/dense/vars/0 \(head/kernel\): model \(48, 5\), "
                                         r"file \(48, 10\).*layers/dense/vars/1 \(head/bias\): model \(5,\), "
                                         r"file \(10,\)"):
        vit_keras.load_weights(model, path)
    _assert_untouched(model, before)


def test_constructor_refuses_a_file_that_does_not_fit(tmp_path):
    path = _saved(tmp_path, num_layers=3)
    with pytest.raises(ValueError, match="nothing was loaded"):
        vit_keras.ViT(image_size=16, classes=5, weights=path, **TINY)


@pytest.mark.slow
def test_file_of_a_compiled_model_loads_into_a_plain_one(tmp_path):
    trained = _model()
    trained.compile("adam", "sparse_categorical_crossentropy")
    trained.fit(np.zeros((2, 16, 16, 3)), np.zeros(2), verbose=0)
    path = str(tmp_path / "trained.weights.h5")
    trained.save_weights(path)
    with h5py.File(path) as f:
        assert "optimizer" in f  # the training state Keras writes beside the weights, not compared
    model = vit_keras.load_weights(_model(), path)
    for a, b in zip(trained.weights, model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_unreadable_file_names_the_file(tmp_path):
    path = tmp_path / "broken.weights.h5"
    path.write_bytes(b"not hdf5 at all")
    with pytest.raises(ValueError, match=r"broken.weights.h5.*not a readable Keras weights file"):
        keras_h5.load_keras_weights(_model(), str(path))
    with pytest.raises(ValueError, match="does not exist"):
        keras_h5.load_keras_weights(_model(), str(tmp_path / "missing.weights.h5"))
