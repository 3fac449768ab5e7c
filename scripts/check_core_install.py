"""Check that the core install (model, weights, inspection) runs without TensorFlow on the chosen Keras backend.

Run by `make check-jax-install` in a fresh virtualenv holding only `vit-keras3[jax]`, and by the test suite with
`--block-tensorflow`, which makes every `import tensorflow*` fail in this process.

Example:
    KERAS_BACKEND=jax python scripts/check_core_install.py --timm-dir tests/fixtures/family/timm_deit_distilled
"""

import argparse
import importlib.abc
import importlib.util
import json
import os
import sys

BLOCKED = ("tensorflow", "tensorflow_datasets", "tf_keras", "tensorboard", "ai_edge_litert")


class _RefuseTensorFlow(importlib.abc.MetaPathFinder):
    """A meta-path finder under which `import tensorflow` (and its satellites) raises ImportError."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked: this check runs the core install without TensorFlow.")
        return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timm-dir", required=True, help="a timm fixture case (checkpoint/, input.npy, expected.npy)")
    parser.add_argument("--block-tensorflow", action="store_true", help="make every tensorflow import fail")
    parser.add_argument("--full-size", action="store_true", help="also build ViT-B/16 at 224 (weights=None)")
    args = parser.parse_args(argv)
    if args.block_tensorflow:
        sys.meta_path.insert(0, _RefuseTensorFlow())
    else:
        installed = [name for name in BLOCKED if importlib.util.find_spec(name) is not None]
        if installed:
            sys.exit(f"FAIL: the core install pulled in {', '.join(installed)}.")
        print("tensorflow is not installed")

    import keras
    import numpy as np

    import vit_keras
    import vit_keras.inspection

    print(f"backend {keras.backend.backend()}")
    if args.full_size:
        model = vit_keras.ViTB16(weights=None)
        print(f"ViTB16(weights=None): {model.count_params()} parameters, output {model.output_shape}")

    with open(os.path.join(args.timm_dir, "meta.json")) as f:
        meta = json.load(f)
    model = vit_keras.from_pretrained(os.path.join(args.timm_dir, meta["checkpoint"]), **meta["call"])
    images = np.load(os.path.join(args.timm_dir, "input.npy")).astype(np.float32)
    expected = np.load(os.path.join(args.timm_dir, "expected.npy"))
    logits = model.predict(images, verbose=0)
    # The family fixtures' tolerance (tests/fixtures/family/README.md).
    diff = float(np.abs(logits - expected).max())
    if diff > 5e-5 * max(1.0, float(np.abs(expected).max())):
        sys.exit(f"FAIL: from_pretrained logits differ from timm's by {diff:.2e}.")
    print(f"from_pretrained(timm) predict: max |diff| vs timm {diff:.1e}")

    tiny = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
                         classes=4, weights=None)
    tiny.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x, y = rng.random((16, 32, 32, 3), dtype=np.float32), np.arange(16) % 4
    start = [np.array(w) for w in tiny.get_weights()]
    losses = tiny.fit(x, y, epochs=2, batch_size=8, verbose=0).history["loss"]
    moved = sum(not np.array_equal(w0, w1) for w0, w1 in zip(start, tiny.get_weights()))
    if not (np.all(np.isfinite(losses)) and moved == len(start)):
        sys.exit(f"FAIL: fit gave losses {losses} and updated {moved} of {len(start)} weights.")
    print(f"fit: losses {np.round(losses, 4).tolist()}, all {moved} weights updated")
    maps = vit_keras.inspection.attention_maps(tiny, x[:2])
    if not np.allclose(maps.rollout.sum(axis=(-2, -1)), 1.0, atol=1e-5):
        sys.exit("FAIL: attention rollout is not a distribution over patches.")
    print(f"inspection: attention rollout {maps.rollout.shape}")
    leaked = sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED)
    if leaked:
        sys.exit(f"FAIL: imported {', '.join(leaked)}.")
    print("OK")


if __name__ == "__main__":
    main()
