"""vit_keras.export.to_onnx: ONNX Runtime gives the Keras model's outputs: the paper's ViT, a hybrid, the family.

Each model is exported once (module-scoped) and run by ONNX Runtime on a batch; the tolerance is 1e-4 on the main
output (ONNX Runtime's float32 kernels, not TensorFlow's) and the top-1 class must agree on every image. The
family models are the timm checkpoints of tests/fixtures/family (random weights), so ONNX Runtime is also held to
timm's own logits.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

pytest.importorskip("tf2onnx")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import vit_keras  # noqa: E402
from tests.tiny import TINY  # noqa: E402
from vit_keras import export  # noqa: E402
from vit_keras.cli import main as cli_main  # noqa: E402

# Slow: every test writes an ONNX file through tf2onnx (about 5 s each on 2 cores).
pytestmark = pytest.mark.slow

FAMILY = os.path.join(os.path.dirname(__file__), "fixtures", "family")
# Probabilities in [0, 1] from ONNX Runtime's float32 kernels against TensorFlow's: other summation orders and
# exp/erf approximations over a 2-layer chain, the same budget as TFLite float32 (tests/test_export.py). Worst
# measured across the 7 settings `make test-numerics` runs on an AVX2 EPYC: 1.8e-7 (550x).
ONNX_TOL = 1e-4
# timm's logits against ONNX Runtime's: the family tests' own tolerance, 5e-5 x max(1, max |logit|).
FAMILY_TOL = 5e-5


def _randomised(model, seed=0):
    """`model` with N(0, 0.1) added to every weight: the zero-initialised head gets distinct class scores."""
    rng = np.random.default_rng(seed)
    model.set_weights([w + rng.normal(0, 0.1, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model


def _images(size, count=8, seed=1):
    return np.random.default_rng(seed).uniform(0, 255, (count, *size, 3)).astype(np.float32)


def _keras(model, images):
    return np.asarray(keras.ops.convert_to_numpy(model(images, training=False)), np.float32)


def _assert_agrees(got, expected, tol=ONNX_TOL):
    assert got.shape == expected.shape
    diff = float(np.abs(got - expected).max())
    assert diff <= tol, f"max |diff| {diff:.3g} > {tol}"
    np.testing.assert_array_equal(got.argmax(-1), expected.argmax(-1))  # top-1 agreement 100%
    return diff


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx")


@pytest.fixture(scope="module")
def plain(onnx_dir):
    """A tiny ViT exported through `export_and_compare`'s ONNX row (labels: its own classes)."""
    keras.utils.set_random_seed(0)
    model = _randomised(vit_keras.ViT(image_size=32, classes=10, **TINY))
    images = _images((32, 32), count=8)
    labels = _keras(model, images).argmax(-1)
    (row,) = export.export_and_compare(model, images, onnx_dir, labels=labels, formats=("onnx",), print_fn=None)
    return model, row.path, row


def test_plain_vit_file_contract(plain):
    _, path, _ = plain
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    assert {entry.domain: entry.version for entry in proto.opset_import}[""] == export.DEFAULT_OPSET == 17
    (images,) = proto.graph.input
    (output,) = proto.graph.output
    assert images.name == "images" and output.name == "probabilities"
    shape = [d.dim_param or d.dim_value for d in images.type.tensor_type.shape.dim]
    assert shape == ["batch", 32, 32, 3]
    assert [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim] == ["batch", 10]
    # Weights are in the file itself (no external data) and are float32.
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)


@pytest.mark.numerics
def test_plain_vit_agrees_with_keras_at_any_batch_size(plain, record_property):
    model, path, _ = plain
    images = _images((32, 32), count=16)
    expected = _keras(model, images)
    assert float(np.abs(expected - expected.mean(0)).max()) > 0.05, "the classes must have distinct scores"
    session = export.onnx_session(path)
    diff = _assert_agrees(export.onnx_predict(session, images)["probabilities"], expected)
    diff = max(diff, _assert_agrees(export.onnx_predict(session, images[:1])["probabilities"], expected[:1]))
    record_property("max_abs_diff_onnx", float(f"{diff:.3g}"))
    record_property("bound:max_abs_diff_onnx", f"< {ONNX_TOL}")


@pytest.mark.slow
def test_hybrid_feature_extractor_through_a_tensorflow_process(onnx_dir, monkeypatch):
    """A hybrid (ResNet stem) built for [-1, 1] inputs, without pooling: the rescaling is in the graph and it serves
    features and tokens. Exported the way a JAX or PyTorch model is (saved as .keras, converted by a
    KERAS_BACKEND=tensorflow process)."""
    keras.utils.set_random_seed(0)
    model = _randomised(vit_keras.ViT(
        image_size=32, resnet={"num_layers": [1], "width_factor": 1}, include_top=False, include_preprocessing=False,
        **{**TINY, "num_layers": 1, "patch_size": 2},
    ))
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")  # takes the .keras + subprocess route
    path = export.to_onnx(model, onnx_dir / "hybrid.onnx")
    monkeypatch.undo()
    images = _images((32, 32), count=4)
    outputs = export.onnx_predict(path, images)
    tokens = _keras(model, images / 127.5 - 1.0)
    assert sorted(outputs) == ["features", "tokens"] and tokens.shape == (4, 1 + 16, 48)
    np.testing.assert_allclose(outputs["tokens"], tokens, atol=ONNX_TOL, rtol=0)
    np.testing.assert_allclose(outputs["features"], tokens[:, 0], atol=ONNX_TOL, rtol=0)


@pytest.mark.parametrize("case", ["timm_dinov2_reg4", "timm_deit_distilled", "timm_siglip_map"])
def test_family_model_agrees_with_keras_and_timm(case, onnx_dir):
    """DINOv2 with registers and LayerScale, a distilled DeiT (two heads averaged), SigLIP's MAP head."""
    directory = os.path.join(FAMILY, case)
    model = vit_keras.from_pretrained(os.path.join(directory, "checkpoint"), classifier_activation=None)
    path = export.to_onnx(model, onnx_dir / f"{case}.onnx")
    session = export.onnx_session(path)
    fixture_images = np.load(os.path.join(directory, "input.npy")).astype(np.float32)
    images = np.concatenate([fixture_images, _images(fixture_images.shape[1:3], count=6)])
    _assert_agrees(export.onnx_predict(session, images)["logits"], _keras(model, images))
    timm_logits = np.load(os.path.join(directory, "expected.npy"))
    got = export.onnx_predict(session, fixture_images)["logits"]
    _assert_agrees(got, timm_logits, FAMILY_TOL * max(1.0, float(np.abs(timm_logits).max())))


def test_errors_name_the_problem_and_the_fix(plain, tmp_path):
    model, path, _ = plain
    before = os.path.getmtime(path)
    with pytest.raises(ValueError, match="already exists; pass overwrite=True"):
        export.to_onnx(model, path)
    assert os.path.getmtime(path) == before
    with pytest.raises(ValueError, match=r"should be a \.onnx file"):
        export.to_onnx(model, tmp_path / "vit.tflite")
    with pytest.raises(ValueError, match="`opset` must be an int from 13 to 18"):
        export.to_onnx(model, tmp_path / "vit.onnx", opset=9)
    with pytest.raises(ValueError, match=r"takes images of shape \(batch, 32, 32, 3\), got \(2, 48, 48, 3\); resize"):
        export.onnx_predict(path, _images((48, 48), count=2))
    with pytest.raises(ValueError, match="does not exist; write it with export.to_onnx"):
        export.onnx_predict(tmp_path / "missing.onnx", _images((32, 32), count=1))
    assert sorted(os.listdir(tmp_path)) == []  # nothing half-written


def test_export_and_compare_has_an_onnx_row(plain, onnx_dir):
    model, path, row = plain
    assert row.format == "onnx" and path == str(onnx_dir / "vit.onnx")
    assert row.top1_agreement == 1.0 and row.accuracy == 1.0 and row.meets_target and row.num_images == 8
    assert row.max_abs_diff <= ONNX_TOL and row.size_bytes > 4 * model.count_params()
    assert "onnx" not in export.DEFAULT_FORMATS
    check = export.measure_agreement(model, path, _images((32, 32), count=4))
    assert check.format == "onnx" and check.top1_agreement == 1.0


def test_cli_writes_onnx_and_refuses_to_replace_it(plain, tmp_path, capsys):
    model, _, _ = plain
    keras_path = str(tmp_path / "tiny.keras")
    model.save(keras_path)
    output = str(tmp_path / "out" / "vit.onnx")
    argv = ["export", output, "--format", "onnx", "--keras-model", keras_path, "--num-check-images", "4"]
    assert cli_main([*argv, "--opset", "15"]) == 0
    out = capsys.readouterr().out
    assert f"wrote ONNX (opset 15, float32) to {output}" in out
    assert "input images float32[batch, 32, 32, 3]" in out
    assert "agreement with the Keras model on 4 random images" in out and "top-1 100.00%" in out
    assert {e.domain: e.version for e in onnx.load(output).opset_import}[""] == 15
    before = os.path.getmtime(output)
    assert cli_main(argv) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert cli_main([*argv, "--overwrite", "--quantization", "int8"]) == 2
    assert "apply to --format tflite only" in capsys.readouterr().err
    assert cli_main(["export", str(tmp_path / "vit.tflite"), "--format", "onnx", "--keras-model", keras_path]) == 2
    assert "should be a .onnx file" in capsys.readouterr().err
    assert os.path.getmtime(output) == before and sorted(os.listdir(tmp_path / "out")) == ["vit.onnx"]
