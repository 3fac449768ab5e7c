"""Write the files tests/test_legacy_files.py loads: a vision model, the two towers of a zero-shot model and a dense
segmentation model as `.keras` files, and the vision model as a TensorFlow SavedModel, each with an input and the
output it gave when saved (`NAME.npz`: `input` or `input_NAME` for a dict input, and `output`).

Run with the release whose files are to stay readable, from its checkout (the repository root on `sys.path`):
    python tests/make_legacy_fixtures.py OUT_DIR
"""

import os
import sys

import keras
import numpy as np

sys.path.insert(0, os.getcwd())

import vit_keras  # noqa: E402
from tests.reference_numpy import randomize_weights  # noqa: E402
from vit_keras import dense, zeroshot  # noqa: E402

TINY = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64)


def save(out, name, model, x):
    model.save(os.path.join(out, f"{name}.keras"))
    y = np.asarray(keras.ops.convert_to_numpy(model(x, training=False)), "float32")
    inputs = {f"input_{k}": np.asarray(v) for k, v in x.items()} if isinstance(x, dict) else {"input": x}
    np.savez(os.path.join(out, f"{name}.npz"), output=y, **inputs)
    return y


def main(out):
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 255, (2, 32, 32, 3)).astype("float32")

    vision = vit_keras.ViT(image_size=32, classes=5, **TINY)
    randomize_weights(vision, seed=1)
    save(out, "vision", vision, images)
    vision.export(os.path.join(out, "vision_saved_model"), format="tf_saved_model", verbose=False)

    backbone = vit_keras.ViT(image_size=32, include_top=False, **TINY)
    segmentation = dense.segmentation_model(backbone, num_classes=3)
    randomize_weights(segmentation, seed=2)
    for variable in segmentation.weights:  # a batch norm's variance must stay positive
        if variable.path.endswith("moving_variance"):
            variable.assign(np.abs(keras.ops.convert_to_numpy(variable)) + 1.0)
    save(out, "dense_segmentation", segmentation, images)

    checkpoint = os.path.join("tests", "fixtures", "zeroshot", "siglip", "checkpoint")
    model = zeroshot.from_pretrained(checkpoint)
    save(out, "zeroshot_siglip_image", model.image_model, images)
    ids, _ = model.tokenize(["a photo of a cat", "a dog"])
    save(out, "zeroshot_siglip_text", model.text_model,
         {"token_ids": ids.astype("int32"), "attention_mask": np.ones_like(ids, "int32")})
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs) \
            if os.path.isdir(path) else os.path.getsize(path)
        print(name, size)


if __name__ == "__main__":
    main(sys.argv[1])
