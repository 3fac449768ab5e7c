"""ONNX Runtime against Keras at full size: ViT-B/16 and a DINOv2-S/14 with registers, at 224 px.

Builds each model with random weights (N(0, 0.02) added to every weight, so that the zero-initialised head gives
distinct logits), exports it with `vit_keras.export.to_onnx`, runs the file with ONNX Runtime on a batch of random
images and prints the file size, the largest logit difference and the top-1 agreement with Keras.

    python scripts/onnx_agreement.py                  # both models, 8 images
    python scripts/onnx_agreement.py --models B/16 --images 16
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

# DINOv2-S/14 with 4 registers (timm vit_small_patch14_reg4_dinov2): LayerScale, registers outside the position
# embeddings, exact GELU, LayerNorm eps 1e-6.
FAMILY = {
    "dinov2_reg4_S/14": dict(patch_size=14, hidden_size=384, mlp_dim=1536, num_heads=6, num_layers=12,
                             layer_scale=True, num_register_tokens=4, no_embed_class=True, activation="gelu"),
}


def _model(name, image_size, classes):
    import vit_keras
    from vit_keras.configs import VARIANTS, ViTConfig
    from vit_keras.models import build_vit

    if name in FAMILY:
        config = ViTConfig(name=name, image_size=image_size, **FAMILY[name])
    else:
        config = VARIANTS[name].replace(image_size=image_size)
    model = build_vit(config, classes=classes, classifier_activation=None)
    rng = np.random.default_rng(0)
    model.set_weights([w + rng.normal(0, 0.02, w.shape).astype(w.dtype) for w in model.get_weights()])
    assert vit_keras.weights.model_config(model) == config
    return model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["B/16", *FAMILY], help="paper variants or family models")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--images", type=int, default=8, help="random images to compare on")
    parser.add_argument("--output-dir", default=None, help="where to write the .onnx files (default: a temp dir)")
    args = parser.parse_args(argv)

    import keras

    from vit_keras import export

    keras.utils.set_random_seed(0)
    images = np.random.default_rng(1).uniform(0, 255, (args.images, args.image_size, args.image_size, 3))
    images = images.astype(np.float32)
    print(f"ONNX opset {export.DEFAULT_OPSET}, {args.images} random images at {args.image_size} px, logits\n")
    print("| model | parameters | .onnx size | max abs diff (logits) | max abs logit | top-1 agreement |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            model = _model(name, args.image_size, args.classes)
            expected = np.concatenate([np.asarray(model.predict_on_batch(images[i : i + 4]))
                                       for i in range(0, len(images), 4)])
            path = os.path.join(args.output_dir or tmp, name.replace("/", "_") + ".onnx")
            export.to_onnx(model, path, overwrite=True)
            got = export.onnx_predict(path, images)["logits"]
            diff = float(np.abs(got - expected).max())
            agreement = float(np.mean(got.argmax(-1) == expected.argmax(-1)))
            print(f"| {name} | {model.count_params():,} | {os.path.getsize(path) / 2**20:.1f} MiB "
                  f"| {diff:.2e} | {float(np.abs(expected).max()):.2f} | {100 * agreement:.2f}% |", flush=True)
            del model
            keras.backend.clear_session()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
