"""`serve_bytes` answers each encoded image on its own: an image it cannot serve (corrupt, truncated, not an image,
above the pixel limit) is marked in `image_ok` / `image_error` with NaN outputs, and the other images of the request
get the outputs they get alone. Both SavedModels: a fixed-size ViT's (`export.saved_model`) and a flexible (NaFlex)
model's (`export.naflex_saved_model`), loaded with `tf.saved_model.load` as TF Serving loads the graph.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import PIL.Image
import pytest
import tensorflow as tf

import vit_keras
from tests.image_bombs import bomb_png
from tests.tiny import TINY
from vit_keras import export

pytestmark = pytest.mark.tf_only

# The exports' bound for the same image served in another request (tests/test_export.py's SAVED_MODEL_TOL,
# tests/test_naflex.py's ALONE_TOLERANCE): the same graph, another batch.
ALONE_TOL = 1e-5
PIXEL_LIMIT = 64 * 64


def _pixels(height, width, seed):
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _encode(kind, pixels, **options):
    buffer = io.BytesIO()
    PIL.Image.fromarray(pixels).save(buffer, kind, **options)
    return buffer.getvalue()


def _zeroed_middle(data, count=300):
    """`data` with `count` bytes in its middle overwritten with zeros."""
    start = (len(data) - count) // 2
    return data[:start] + bytes(count) + data[start + count:]


def _photo(height, width):
    """A smooth picture: its JPEG is mostly compressed data, as a photograph's is."""
    rows, cols = np.mgrid[0:height, 0:width]
    return np.stack([rows * 255 // height, cols * 255 // width, (rows + cols) % 256], axis=-1).astype(np.uint8)


GOOD_PNG = _encode("PNG", _pixels(40, 56, 1))
GOOD_JPEG = _encode("JPEG", _pixels(48, 32, 2), quality=90)
# A 16x16 JPEG is mostly header (quantisation and Huffman tables): zeroing its middle puts 300 bytes between two
# segments, which libjpeg skips with a "Corrupt JPEG data: extraneous bytes" warning and TensorFlow decodes.
SMALL_JPEG_ZEROED = _zeroed_middle(_encode("JPEG", _pixels(16, 16, 6)))


def _bad_images():
    """{name: (encoded bytes, what image_error says)} for images serve_bytes refuses."""
    jpeg, png = GOOD_JPEG, GOOD_PNG
    webp = _encode("WEBP", _pixels(32, 32, 3))
    zeroed_header = jpeg[:2] + bytes(100) + jpeg[102:]
    garbage = jpeg[:3] + np.random.default_rng(4).bytes(len(jpeg) - 3)
    return {
        "truncated JPEG": (jpeg[: len(jpeg) // 2], "is a corrupt or truncated JPEG file"),
        "JPEG without its end": (jpeg[:-2], "is a corrupt or truncated JPEG file"),
        "JPEG magic bytes only": (jpeg[:3], "is a corrupt or truncated JPEG file"),
        "truncated PNG": (png[: len(png) // 2], "is a corrupt or truncated PNG file"),
        "PNG header only": (png[:33], "is a corrupt or truncated PNG file"),
        "PNG with a damaged chunk": (png[:40] + bytes([png[40] ^ 1]) + png[41:], "is a corrupt or truncated PNG"),
        "JPEG with a zeroed header": (zeroed_header, "is not a JPEG, PNG, GIF or BMP image"),
        "garbage after JPEG magic": (garbage, "is a corrupt or truncated JPEG file"),
        "small JPEG, middle zeroed": (SMALL_JPEG_ZEROED, "is a corrupt or truncated JPEG file: its markers are not "
                                      "where its segment lengths place them"),
        "empty string": (b"", "is empty (0 bytes)"),
        "text": (b"name,label\ncat,1\n", "is not a JPEG, PNG, GIF or BMP image"),
        "WebP": (webp, "is not a JPEG, PNG, GIF or BMP image"),
        "above the pixel limit": (_encode("PNG", _pixels(65, 64, 5)), "is an image of 64x65 pixels, which exceeds "
                                  f"the serving limit of {PIXEL_LIMIT} pixels"),
    }


def _randomised(model):
    """`model` with random weights: its zero-initialised head would answer every image alike."""
    rng = np.random.default_rng(9)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype(np.float32))
    return model


@pytest.fixture(scope="module")
def fixed_size(tmp_path_factory):
    """A tiny 32x32 classifier (random weights, as below) and its SavedModel (pixel limit 64x64), loaded back."""
    model = _randomised(vit_keras.ViT(image_size=32, classes=4, **TINY))
    path = export.saved_model(model, tmp_path_factory.mktemp("fixed") / "vit", class_names=["a", "b", "c", "d"],
                              top_k=2, max_image_pixels=PIXEL_LIMIT)
    return path, tf.saved_model.load(path).signatures["serve_bytes"]


@pytest.fixture(scope="module")
def flexible(tmp_path_factory):
    """A tiny NaFlex model (random weights) and its SavedModel of 16 patches (pixel limit 64x64), loaded back."""
    model = _randomised(vit_keras.ViT(flexible=True, **TINY, classes=5, classifier_activation=None))
    path = export.naflex_saved_model(model, str(tmp_path_factory.mktemp("naflex") / "vit"), max_num_patches=16,
                                     max_image_pixels=PIXEL_LIMIT)
    return path, tf.saved_model.load(path).signatures["serve_bytes"]


def _serve(signature, images):
    return {name: value.numpy() for name, value in signature(image_bytes=tf.constant(images)).items()}


def _check_answered_per_image(signature, bad, reason, main_output):
    """[good PNG, bad, good JPEG] in one request: the good ones as alone, the bad one marked with NaN outputs."""
    served = _serve(signature, [GOOD_PNG, bad, GOOD_JPEG])
    np.testing.assert_array_equal(served["image_ok"], [True, False, True])
    assert served["image_error"][0] == served["image_error"][2] == b""
    error = served["image_error"][1].decode()
    assert error.startswith("image_bytes[1] ") and reason in error, error
    for row, good in ((0, GOOD_PNG), (2, GOOD_JPEG)):
        alone = _serve(signature, [good])
        assert alone["image_ok"].tolist() == [True]
        np.testing.assert_allclose(served[main_output][row], alone[main_output][0], atol=ALONE_TOL, rtol=0)
        assert np.isfinite(served[main_output][row]).all()
    assert np.isnan(served[main_output][1]).all()
    return served


def test_the_jpeg_structure_check_passes_whole_files_and_refuses_broken_ones():
    from vit_keras.export.image_bytes import jpeg_markers_in_place

    check = tf.function(jpeg_markers_in_place, input_signature=[tf.TensorSpec((), tf.string)], autograph=False)
    photo = _photo(120, 160)
    plain = _encode("JPEG", photo)
    exif = PIL.Image.Exif()
    exif[0x010F] = "camera"
    whole = {
        "baseline": plain,
        "progressive": _encode("JPEG", photo, progressive=True),
        "optimised Huffman tables": _encode("JPEG", photo, optimize=True, quality=40),
        "restart markers": _encode("JPEG", photo, restart_marker_blocks=3),
        "EXIF": _encode("JPEG", photo, exif=exif.tobytes()),
        "greyscale": tf.io.encode_jpeg(photo[..., :1]).numpy(),
        "4:4:4 (TensorFlow's encoder)": tf.io.encode_jpeg(photo, chroma_downsampling=False).numpy(),
        "a trailer after the end marker": plain + b"camera trailer",
        "fill bytes before a marker": plain.replace(b"\xff\xda", b"\xff\xff\xff\xda", 1),
    }
    for name, data in whole.items():
        assert bool(check(data)), name
        assert tf.io.decode_jpeg(data).shape[:2] == photo.shape[:2], name
    assert tf.io.decode_jpeg(SMALL_JPEG_ZEROED).shape == (16, 16, 3)  # decoded, with a warning only
    broken = {"small JPEG, middle zeroed": SMALL_JPEG_ZEROED, "no end marker": plain[:-2],
              "cut in a header": plain[:300], "cut in the data": plain[: len(plain) // 2],
              "a segment length off by one": plain.replace(b"\xff\xc4\x00", b"\xff\xc4\x01", 1)}
    for name, data in broken.items():
        assert not bool(check(data)), name


@pytest.mark.slow  # tracing the tf.data pipeline takes a few seconds
def test_damage_inside_a_jpegs_compressed_data_is_not_detected():
    """What the documentation says is not detected: 300 zeroed bytes in the middle of a photograph's JPEG land in
    its compressed data; libjpeg repairs them with a warning, and the image is served as decoded."""
    from vit_keras.export.image_bytes import decode_each_image

    serve = tf.function(lambda data: decode_each_image(data, lambda image: tf.image.resize(image, (32, 32)), 10**8),
                        input_signature=[tf.TensorSpec((None,), tf.string)], autograph=False)
    photo = _encode("JPEG", _photo(240, 320))
    assert photo.index(b"\xff\xda") < len(photo) // 2 - 150  # the zeroed bytes are all after the scan header
    _, image_ok, image_error = serve(tf.constant([_zeroed_middle(photo)]))
    assert image_ok.numpy().tolist() == [True] and image_error.numpy().tolist() == [b""]


@pytest.mark.slow
def test_fixed_size_serve_bytes_answers_a_corrupt_image_on_its_own(fixed_size):
    _, serve_bytes = fixed_size
    outputs = serve_bytes.structured_outputs
    assert {"probabilities", "top_k_classes", "top_k_scores", "top_k_labels"} < set(outputs)
    assert (outputs["image_ok"].dtype, outputs["image_error"].dtype) == (tf.bool, tf.string)
    for name, (bad, reason) in _bad_images().items():
        served = _check_answered_per_image(serve_bytes, bad, reason, "probabilities")
        # The bad image's top-k is blank, not the top-k of a black placeholder image.
        assert served["top_k_classes"][1].tolist() == [-1, -1], name
        assert np.isnan(served["top_k_scores"][1]).all() and served["top_k_labels"][1].tolist() == [b"", b""], name
        assert served["top_k_labels"][0].tolist() != [b"", b""], name


@pytest.mark.slow
def test_naflex_serve_bytes_answers_a_corrupt_image_on_its_own(flexible):
    _, serve_bytes = flexible
    for bad, reason in _bad_images().values():
        _check_answered_per_image(serve_bytes, bad, reason, "outputs")


@pytest.mark.slow
def test_a_request_of_only_bad_images_is_answered(fixed_size, flexible):
    for (_, serve_bytes), output in ((fixed_size, "probabilities"), (flexible, "outputs")):
        served = _serve(serve_bytes, [b"", GOOD_JPEG[:100]])
        assert served["image_ok"].tolist() == [False, False] and np.isnan(served[output]).all()
        assert _serve(serve_bytes, tf.zeros((0,), tf.string))[output].shape[0] == 0


@pytest.mark.slow
def test_a_decompression_bomb_is_refused_without_decoding_it(fixed_size, flexible):
    """A 20000x20000 PNG of ~50 KB (1.2 GB once decoded): refused from its header, as the image's own answer."""
    bomb = bomb_png(20000, 20000)
    for (_, serve_bytes), output in ((fixed_size, "probabilities"), (flexible, "outputs")):
        served = _check_answered_per_image(serve_bytes, bomb, "is an image of 20000x20000 pixels, which exceeds the "
                                           f"serving limit of {PIXEL_LIMIT} pixels (400000000 pixels", output)
        assert "max_image_pixels" in served["image_error"][1].decode()


SERVE_WITHOUT_VIT_KERAS = textwrap.dedent(
    """
    import json, sys
    sys.modules["vit_keras"] = None  # the SavedModel must run with TensorFlow alone, as in TF Serving
    import tensorflow as tf

    export_dir, *paths = sys.argv[1:]
    serve = tf.saved_model.load(export_dir).signatures["serve_bytes"]
    images = [open(path, "rb").read() for path in paths]
    together = serve(image_bytes=tf.constant(images))
    alone = [serve(image_bytes=tf.constant([image]))["probabilities"].numpy()[0].tolist() for image in images]
    print(json.dumps({"together": together["probabilities"].numpy().tolist(), "alone": alone,
                      "ok": together["image_ok"].numpy().tolist(),
                      "error": [error.decode() for error in together["image_error"].numpy()]}))
    """
)


@pytest.mark.slow
def test_a_plain_tensorflow_process_answers_a_corrupt_image_on_its_own(fixed_size, tmp_path):
    path, _ = fixed_size
    names = []
    for name, data in (("good.png", GOOD_PNG), ("cut.jpg", GOOD_JPEG[:200]), ("good.jpg", GOOD_JPEG)):
        (tmp_path / name).write_bytes(data)
        names.append(str(tmp_path / name))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", SERVE_WITHOUT_VIT_KERAS, path, *names], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    assert served["ok"] == [True, False, True]
    assert served["error"][1].startswith("image_bytes[1] is a corrupt or truncated JPEG file"), served["error"]
    together, alone = np.asarray(served["together"], np.float64), np.asarray(served["alone"], np.float64)
    np.testing.assert_allclose(together[[0, 2]], alone[[0, 2]], atol=ALONE_TOL, rtol=0)
    assert np.isnan(together[1]).all()
