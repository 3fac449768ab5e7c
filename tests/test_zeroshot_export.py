"""The zero-shot SavedModel (`vit_keras.zeroshot.deployment`): its signatures, loaded in a TensorFlow process that
never imports vit_keras, give what the Keras towers give (float32, the same graph ops: 1e-5 absolute on features
of magnitude ~3 covers the difference between eager and graph kernels)."""

import io
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from tests import zeroshot_cases as cases
from vit_keras import zeroshot
from vit_keras.preprocessing import naflex_size
from vit_keras.zeroshot import deployment

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="SavedModel export runs on TF")
TOLERANCE = 1e-5
LABELS = ["cat", "dog", "red car"]
# texts beyond the reference cases' for the tokenizer inside the graph: punctuation, digits, non-ASCII, an empty
# text, one longer than the context (truncated as the checkpoint's tokenizer does)
STRING_CASES = ["Hello,   World!! 123", "naïve café — ΟΔΟΣ 日本 🐱", "", " ".join(["photo"] * 40)]
TEMPLATES = ["a photo of a {}.", "{}"]

# Run in a fresh interpreter: TensorFlow only; a vit_keras import would fail the run.
LOADER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    sys.modules["vit_keras"] = None  # any import of vit_keras raises ImportError
    path, inputs, out = sys.argv[1], np.load(sys.argv[2]), sys.argv[3]
    loaded = tf.saved_model.load(path)
    s = loaded.signatures
    images, ids, mask = (tf.constant(inputs[name]) for name in ("images", "token_ids", "attention_mask"))
    texts = tf.constant(list(inputs["texts"]))
    result = dict(image_features=s["encode_image"](images=images)["image_features"].numpy(),
                  text_features=s["encode_text"](texts=texts)["text_features"].numpy(),
                  id_features=s["encode_token_ids"](token_ids=ids, attention_mask=mask)["text_features"].numpy())
    tokens = s["tokenize"](texts=texts)
    result.update(token_ids=tokens["token_ids"].numpy(), attention_mask=tokens["attention_mask"].numpy())
    classified = s["classify"](images=images, texts=texts)
    result.update(logits=classified["logits_per_image"].numpy(), scores=classified["scores"].numpy())
    by_ids = s["classify_token_ids"](images=images, token_ids=ids, attention_mask=mask)
    result.update(id_logits=by_ids["logits_per_image"].numpy())
    if "encode_image_bytes" in s:
        result["bytes_features"] = s["encode_image_bytes"](image_bytes=tf.constant(list(inputs["png"])))[
            "image_features"].numpy()
        jpeg = s["classify_image_bytes"](image_bytes=tf.constant(list(inputs["jpeg"])), texts=texts)
        result.update(jpeg_logits=jpeg["logits_per_image"].numpy(), jpeg_scores=jpeg["scores"].numpy())
    labelled = s["classify_labels"](images=images)
    result.update(label_scores=labelled["scores"].numpy(),
                  top_labels=np.array([x.decode() for x in labelled["top_labels"].numpy()]))
    np.savez(out, **result)
    print(json.dumps(sorted(s)))
""")


def _encoded(image, kind):
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image.astype(np.uint8)).save(buffer, kind)
    return buffer.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("case", ["clip", "siglip2"])
def test_saved_model_loads_without_vit_keras_and_matches_the_towers(case, tmp_path):
    model = zeroshot.from_pretrained(os.path.join(cases.case_dir(case), "checkpoint"))
    images = np.load(os.path.join(cases.case_dir(case), "input.npy")).round().astype(np.float32)
    texts = cases.texts(case) + STRING_CASES
    with pytest.warns(UserWarning, match="truncated"):
        ids, mask = model.tokenize(texts)
    reference_mask = mask
    mask = np.ones_like(ids) if mask is None else mask
    path = deployment.saved_model(model, str(tmp_path / "zeroshot"), class_names=LABELS, templates=TEMPLATES)
    inputs = str(tmp_path / "inputs.npz")
    jpegs = [_encoded(image, "JPEG") for image in images]
    fixed = model.image_size is not None
    # A model of any size (SigLIP 2) takes each image at its own aspect ratio: two other shapes than the towers'.
    png_images = images if fixed else [images[0][:, :24], images[1][:16]]
    np.savez(inputs, images=images, token_ids=ids, attention_mask=mask,
             texts=np.array([text.encode() for text in texts], dtype=object).astype(bytes),
             png=np.array([_encoded(image, "PNG") for image in png_images], dtype=object).astype(bytes),
             jpeg=np.array(jpegs, dtype=object).astype(bytes))
    out = str(tmp_path / "out.npz")
    run = subprocess.run([sys.executable, "-c", LOADER, path, inputs, out], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, PYTHONPATH=""), cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr[-3000:]
    signatures = json.loads(run.stdout.strip().splitlines()[-1])
    assert signatures == sorted(["classify", "classify_labels", "classify_token_ids", "encode_image", "encode_text",
                                 "encode_token_ids", "tokenize", "encode_image_bytes", "classify_image_bytes"])
    found = np.load(out)
    # the graph's tokenizer gives the checkpoint tokenizer's ids and mask
    np.testing.assert_array_equal(found["token_ids"], ids)
    if reference_mask is not None:
        np.testing.assert_array_equal(found["attention_mask"], reference_mask)
    image_features, text_features = model.encode_image(images), model.encode_text(ids, reference_mask)
    np.testing.assert_allclose(found["image_features"], image_features, atol=TOLERANCE)
    np.testing.assert_allclose(found["text_features"], text_features, atol=TOLERANCE)
    np.testing.assert_allclose(found["id_features"], text_features, atol=TOLERANCE)
    logits = model.logits(image_features, text_features)
    np.testing.assert_allclose(found["logits"], logits, atol=10 * TOLERANCE)
    np.testing.assert_allclose(found["id_logits"], logits, atol=10 * TOLERANCE)
    import tensorflow as tf

    def served_size(image):
        """What the bytes signatures resize an image to: the model's size, or (any size) its NaFlex size for
        deployment.DEFAULT_MAX_NUM_PATCHES, bilinear and antialiased as the graph does."""
        image = np.asarray(image, np.float32)
        if fixed:
            return image
        size = naflex_size(*image.shape[:2], model.patch_size, deployment.DEFAULT_MAX_NUM_PATCHES)
        return tf.image.resize(image, size, method="bilinear", antialias=True).numpy()

    # PNG is lossless: decoding gives the same pixels, and the features are the towers' on them at the served size
    want_png = np.concatenate([model.encode_image(served_size(image)[None]) for image in png_images])
    if fixed:
        np.testing.assert_allclose(want_png, image_features, atol=TOLERANCE)
    np.testing.assert_allclose(found["bytes_features"], want_png, atol=TOLERANCE)
    # strings + JPEG bytes against the Python API on the same decoded pixels (TensorFlow's JPEG decoder)
    decoded = [tf.io.decode_jpeg(data, channels=3).numpy() for data in jpegs]
    want = model.logits(np.concatenate([model.encode_image(served_size(image)[None]) for image in decoded]),
                        text_features)
    np.testing.assert_allclose(found["jpeg_logits"], want, atol=10 * TOLERANCE)
    assert (found["jpeg_logits"].argmax(-1) == want.argmax(-1)).all()
    want = model.classify(images, LABELS, templates=TEMPLATES)
    np.testing.assert_allclose(found["label_scores"], want, atol=TOLERANCE)
    assert list(found["top_labels"]) == [LABELS[i] for i in want.argmax(-1)]


def test_export_refuses_what_it_cannot_serve(tmp_path):
    checkpoint = os.path.join(cases.case_dir("clip"), "checkpoint")
    with pytest.raises(ValueError, match="include_preprocessing=True"):
        deployment.saved_model(zeroshot.from_pretrained(checkpoint, include_preprocessing=False), str(tmp_path / "a"))
    with pytest.raises(ValueError, match="class_names is empty"):
        deployment.saved_model(zeroshot.from_pretrained(checkpoint), str(tmp_path / "b"), class_names=[])
    with pytest.raises(ValueError, match=r"max_num_patches=64 sizes the images of a model of any image size .* "
                                         r"this one takes 32x32 images: drop it"):
        deployment.saved_model(zeroshot.from_pretrained(checkpoint), str(tmp_path / "b"), max_num_patches=64)
    without_tokenizer = zeroshot.from_pretrained(checkpoint)
    without_tokenizer.tokenizer = None
    with pytest.raises(ValueError, match="no tokenizer.*strings=False"):
        deployment.saved_model(without_tokenizer, str(tmp_path / "c"))
    assert not os.path.exists(tmp_path / "c")


@pytest.mark.slow
def test_without_strings_the_token_id_signatures_remain(tmp_path):
    model = zeroshot.from_pretrained(os.path.join(cases.case_dir("siglip"), "checkpoint"))
    model.tokenizer = None  # e.g. a tokenizer with no TensorFlow form: the client tokenizes
    path = deployment.saved_model(model, str(tmp_path / "ids"), strings=False)
    import tensorflow as tf

    signatures = tf.saved_model.load(path).signatures
    assert sorted(signatures) == ["classify_token_ids", "encode_image", "encode_image_bytes", "encode_token_ids"]


@pytest.mark.slow
def test_tflite_towers_match_the_keras_towers(tmp_path):
    # SigLIP 2 at a fixed size (TFLite needs one); float32 builtin kernels: 1e-5 on features of magnitude ~3
    # (measured 1.7e-6).
    model = zeroshot.from_pretrained(os.path.join(cases.case_dir("siglip2"), "checkpoint"), image_size=(32, 32))
    paths = deployment.tflite(model, str(tmp_path / "towers"))
    from vit_keras.export.lite import tflite_predict

    images = np.load(os.path.join(cases.case_dir("siglip2"), "input.npy")).astype(np.float32)
    np.testing.assert_allclose(tflite_predict(paths["image"], images)["features"], model.encode_image(images),
                               atol=TOLERANCE)
    ids, mask = model.tokenize(cases.texts("siglip2"))
    np.testing.assert_allclose(deployment.text_tflite_predict(paths["text"], ids, mask), model.encode_text(ids, mask),
                               atol=TOLERANCE)
    with pytest.raises(ValueError, match=r"image_size=\(height, width\)"):
        deployment.tflite(zeroshot.from_pretrained(os.path.join(cases.case_dir("siglip2"), "checkpoint")),
                      str(tmp_path / "any_size"))
