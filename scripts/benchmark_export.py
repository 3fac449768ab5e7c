"""File size, CPU latency (batch 1) and agreement with Keras for every deployment format.

Exports a model to a TF Serving SavedModel and float32 / float16 / dynamic-range int8 / full int8 TFLite files
and prints a Markdown table (`vit_keras.export.export_and_compare`).

    # the demo's trained digits model, compared on the held-out digits (calibrated on training digits)
    python scripts/benchmark_export.py --keras-model demo_output/vit_digits.keras
    # a paper variant with random weights: sizes and latencies only mean something here
    python scripts/benchmark_export.py --model Ti/16 --image-size 224
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile

import numpy as np


def _digits_split(image_size):
    """The demo's digits (same split as `python -m vit_keras.demo`) at the model's (height, width).

    Resized as the demo's eval pipeline does (`vit_keras.demo.digits_at`), so a model fine-tuned at 12x12 is
    scored on the pixels it saw in training, not on 8x8 digits it cannot take.
    """
    from vit_keras.demo import digits_at

    x_train, _ = digits_at(image_size, "train")
    x_test, y_test = digits_at(image_size, "test")
    return x_train, x_test, y_test


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keras-model", default=None, help="a .keras file (e.g. the demo's vit_digits.keras)")
    parser.add_argument("--model", default="Ti/16", help="paper variant when no --keras-model (default: Ti/16)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--data", choices=("auto", "digits", "random"), default="auto",
                        help="what to compare on: the held-out digits at the model's size, random images, or "
                             "auto (digits for a 10-class --keras-model such as the demo's, else random)")
    parser.add_argument("--images", type=int, default=64, help="random images to compare on (non-digits models)")
    parser.add_argument("--runs", type=int, default=50, help="timed batch-1 calls per format")
    parser.add_argument("--threads", type=int, default=None, help="TFLite interpreter threads (default: all)")
    parser.add_argument("--output-dir", default=None, help="where to write the exports (default: a temp dir)")
    args = parser.parse_args(argv)

    import keras

    import vit_keras
    from vit_keras import export

    keras.utils.set_random_seed(0)
    if args.keras_model:
        model = keras.models.load_model(args.keras_model, safe_mode=True)
        what = args.keras_model
    else:
        variant = vit_keras.configs.VARIANTS[args.model]
        model = vit_keras.ViT(image_size=args.image_size, classes=args.classes, **variant.model_kwargs())
        head = model.get_layer("head")
        # The head starts at zero (every class ties); random weights make the classes distinct.
        head.kernel.assign(np.random.default_rng(0).normal(0, 0.02, head.kernel.shape).astype("float32"))
        what = f"ViT-{args.model} at {args.image_size} px, random weights"
    spec = export.describe_model(model)
    is_digits_model = spec.is_classifier and spec.output_size == 10
    if args.data == "digits" and not is_digits_model:
        parser.error(f"--data digits needs a 10-class classifier; this model outputs {spec.output_size} "
                     f"{spec.output_name}. Use --data random.")
    # A paper variant's random weights make digit accuracy meaningless: auto keeps digits for saved models.
    use_digits = args.data == "digits" or (args.data == "auto" and bool(args.keras_model) and is_digits_model)
    digits = _digits_split(spec.image_size) if use_digits else None
    if digits is not None:
        x_train, images, labels = digits
        calibration = x_train[:200]
        data = f"{len(images)} held-out digits, int8 calibrated on 200 training digits"
    else:
        rng = np.random.default_rng(0)
        images = rng.uniform(0, 255, (args.images, *spec.image_size, 3)).astype(np.float32)
        calibration, labels = images, None
        data = f"{len(images)} random images (agreement on random inputs and weights is only a sanity check)"

    print(f"model: {what} ({model.count_params():,} parameters)")
    print(f"data: {data}")
    print(f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores visible; batch 1, median "
          f"of {args.runs} calls\n")
    with tempfile.TemporaryDirectory() as tmp:
        export.export_and_compare(
            model, images, args.output_dir or tmp, labels=labels, representative_dataset=calibration,
            latency_runs=args.runs, num_threads=args.threads,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
