"""Quantization-aware training against post-training int8, on scikit-learn's digits: accuracy and agreement.

From one float ViT trained on the digits (scripts/quantization_agreement.py's model and seed), it writes three
TFLite files and measures each on the 360 held-out digits: the float32 file, the post-training full-integer int8
file (calibrated on 100 training images) and the int8 file of the same float model fine-tuned quantization-aware
(`vit_keras.quantization.quantize_aware`, a few epochs at a lower learning rate, no representative dataset).
Reported: each file's test accuracy, the QAT file's top-1 agreement with the QAT Keras model, and the CPU.

Example:
    $ python scripts/qat_agreement.py --epochs 30 --qat-epochs 5 --out qat.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import keras
import numpy as np

from vit_keras import export, hardware
from vit_keras.files import atomic_file
from vit_keras.quantization import quantize_aware

try:
    from scripts.quantization_agreement import digits, train
except ImportError:  # run as a file from scripts/
    from quantization_agreement import digits, train


def accuracy(probabilities, labels) -> float:
    return float(np.mean(np.argmax(probabilities, -1) == labels))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30, help="float training epochs")
    parser.add_argument("--qat-epochs", type=int, default=5, help="quantization-aware fine-tuning epochs")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    model, (x_test, y_test) = train(args.epochs)
    (x_train, y_train), _ = digits()
    rows = {"float32 Keras": {"accuracy": accuracy(model.predict(x_test, verbose=0), y_test)}}
    with tempfile.TemporaryDirectory() as directory:
        float_path = export.tflite(model, os.path.join(directory, "float.tflite"))
        rows["float32 TFLite"] = {"accuracy": accuracy(export.tflite_predict(float_path, x_test)["probabilities"],
                                                       y_test)}
        ptq_path = export.tflite(model, os.path.join(directory, "ptq.tflite"), quantization="int8",
                                 representative_dataset=x_train[:100])
        rows["post-training int8 TFLite"] = {
            "accuracy": accuracy(export.tflite_predict(ptq_path, x_test)["probabilities"], y_test)}

        keras.utils.set_random_seed(0)
        qat = quantize_aware(model)
        qat.compile(optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.05),
                    loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        qat.fit(x_train, y_train, batch_size=64, epochs=args.qat_epochs, verbose=0)
        qat_keras = qat.predict(x_test, verbose=0)
        rows["QAT Keras (fake int8)"] = {"accuracy": accuracy(qat_keras, y_test)}
        qat_path = export.tflite(qat, os.path.join(directory, "qat.tflite"), quantization="int8")
        qat_file = export.tflite_predict(qat_path, x_test)["probabilities"]
        rows["QAT int8 TFLite"] = {
            "accuracy": accuracy(qat_file, y_test),
            "agreement_with_qat_keras": float(np.mean(qat_file.argmax(-1) == qat_keras.argmax(-1))),
            "max_prob_diff_to_qat_keras": float(np.abs(qat_file - qat_keras).max()),
        }
    report = {"cpu": hardware.cpu_info().model, "keras": keras.__version__, "test_images": len(x_test),
              "float_epochs": args.epochs, "qat_epochs": args.qat_epochs,
              "seconds": round(time.perf_counter() - start), "rows": rows}
    print(json.dumps(report, indent=2))
    if args.out:
        with atomic_file(args.out) as tmp, open(tmp, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
