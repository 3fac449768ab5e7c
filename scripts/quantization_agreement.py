"""Top-1 agreement and predict speed of int8 / float8 / int4 against float32.

Trains a small ViT on scikit-learn's digits for a minute (offline), quantizes copies of it with
`model.quantize(mode)`, and reports each copy's test accuracy, its top-1 agreement with the float32 model and the
largest probability difference; then times `model.predict` at batch 16 on the digits model and on a ViT-B/16 at
224 px (random weights: speed does not depend on them). Every quantized copy is also saved and reloaded
(`safe_mode=True`) and must predict identically.

Example:
    $ python scripts/quantization_agreement.py --epochs 30 --out quantization.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import tempfile
import time

import keras
import numpy as np

import vit_keras

MODES = ("int8", "float8", "int4")
SIZE = 16  # the 8x8 digits, each pixel repeated 2x2


def digits():
    from sklearn.datasets import load_digits

    data = load_digits()
    images = np.repeat(np.repeat(data.images, 2, axis=1), 2, axis=2) * (255.0 / 16.0)
    images = np.repeat(images[..., None], 3, axis=-1).astype("float32")
    order = np.random.default_rng(0).permutation(len(images))
    images, labels = images[order], data.target[order]
    return (images[:-360], labels[:-360]), (images[-360:], labels[-360:])


def train(epochs: int):
    (x, y), test = digits()
    keras.utils.set_random_seed(0)
    model = vit_keras.ViT(image_size=SIZE, patch_size=4, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128,
                          classes=10, name="digits")
    model.compile(optimizer=keras.optimizers.AdamW(1e-3, weight_decay=0.05), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=epochs, verbose=0)
    return model, test


def images_per_second(model, images, batch=16, repeats=3):
    model.predict(images[:batch], batch_size=batch, verbose=0)  # trace once
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        model.predict(images, batch_size=batch, verbose=0)
        best = min(best, time.perf_counter() - start)
    return len(images) / best


def quantized_copy(model, mode, directory):
    path = os.path.join(directory, "float.keras")
    model.save(path)
    copy = keras.models.load_model(path, safe_mode=True)
    copy.quantize(mode)
    return copy


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--speed-batches", type=int, default=2, help="ViT-B/16 batches of 16 timed per mode")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    # Keras collects garbage for each variable `quantize` replaces (0.4 s each with TensorFlow loaded); the
    # result does not depend on it.
    gc.collect, collect = (lambda *a: 0), gc.collect
    start = time.perf_counter()
    model, (x_test, y_test) = train(args.epochs)
    print(f"trained in {time.perf_counter() - start:.0f} s")
    reference = model.predict(x_test, batch_size=16, verbose=0)
    rows = {"float32": {"accuracy": float(np.mean(reference.argmax(-1) == y_test)), "agreement": 1.0,
                        "max_prob_diff": 0.0, "digits_img_s": images_per_second(model, x_test)}}
    big_input = np.random.default_rng(0).uniform(0, 255, (16 * args.speed_batches, 224, 224, 3)).astype("float32")
    big = vit_keras.ViTB16(classes=1000)
    rows["float32"]["b16_img_s"] = images_per_second(big, big_input, repeats=1)
    with tempfile.TemporaryDirectory() as directory:
        big.save_weights(os.path.join(directory, "b16.weights.h5"))
        for mode in MODES:
            copy = quantized_copy(model, mode, directory)
            probs = copy.predict(x_test, batch_size=16, verbose=0)
            path = os.path.join(directory, f"{mode}.keras")
            copy.save(path)
            same = np.array_equal(keras.models.load_model(path, safe_mode=True).predict(x_test, batch_size=16,
                                                                                       verbose=0), probs)
            big_q = vit_keras.ViTB16(classes=1000)
            big_q.load_weights(os.path.join(directory, "b16.weights.h5"))
            big_q.quantize(mode)
            rows[mode] = {
                "accuracy": float(np.mean(probs.argmax(-1) == y_test)),
                "agreement": float(np.mean(probs.argmax(-1) == reference.argmax(-1))),
                "max_prob_diff": float(np.abs(probs - reference).max()),
                "reload_identical": bool(same),
                "digits_img_s": images_per_second(copy, x_test),
                "b16_img_s": images_per_second(big_q, big_input, repeats=1),
            }
            print(mode, rows[mode])
    gc.collect = collect
    report = {"cpu": platform.processor() or platform.machine(), "keras": keras.__version__,
              "test_images": len(x_test), "rows": rows}
    print(json.dumps(report, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
