"""`vit-keras export OUTPUT --format saved_model|tflite|onnx`: write a deployable model and check it against Keras.

Example:
    $ vit-keras export models/vit --format saved_model --keras-model vit.keras --version 2
    $ vit-keras export vit_int8.tflite --format tflite --quantization int8 --keras-model vit.keras \\
          --calibration-images train_images/
    $ vit-keras export vit.onnx --format onnx --keras-model vit.keras --check-images val_images/
    $ vit-keras export siglip2.tflite --format tflite --keras-model naflex.keras --max-num-patches 256

A flexible (NaFlex) model (`flexible=True`) exports as a SavedModel (`naflex_saved_model`: encoded images of any
size) or a TFLite file of N = --max-num-patches patches (`naflex_tflite`); ONNX is not available for it.
"""

from __future__ import annotations

import argparse
import os

from vit_keras.cli.arguments import patch_budget
from vit_keras.cli.common import add_keras_model_argument, add_model_arguments, load_or_build_model
from vit_keras.files import refuse_existing

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif")


def register(subparsers) -> None:
    """Add the `export` sub-command.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> build_parser().parse_args(["export", "out", "--format", "tflite"]).quantization is None
        True
    """
    parser = subparsers.add_parser(
        "export", help="export a ViT to a TF Serving SavedModel, a TFLite file or an ONNX file", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "output", help="SavedModel base directory (TF Serving's model_base_path), .tflite file or .onnx file"
    )
    parser.add_argument("--format", required=True, choices=("saved_model", "tflite", "onnx"), dest="export_format")
    add_keras_model_argument(parser, "export")
    add_model_arguments(parser)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing SavedModel version directory, .tflite or .onnx file")
    group = parser.add_argument_group("SavedModel")
    group.add_argument("--version", type=int, default=1, help="version sub-directory (default: 1)")
    group.add_argument("--class-names", default=None, metavar="FILE", help="text file, one class name per line")
    group.add_argument("--top-k", type=int, default=5, help="classes returned by the top_k_* outputs (default: 5)")
    group = parser.add_argument_group("TFLite")
    group.add_argument(
        "--quantization", default=None, choices=("float16", "dynamic_int8", "int8"),
        help="default: float32",
    )
    group.add_argument(
        "--calibration-images", nargs="+", default=None, metavar="PATH",
        help="image files or directories of training images to calibrate int8 ranges (needed for int8)",
    )
    group.add_argument("--calibration-samples", type=int, default=100, help="how many calibration images to use")
    group.add_argument(
        "--integer-io", action="store_true", help="with int8: uint8 input pixels and uint8 output (Edge TPU style)"
    )
    group = parser.add_argument_group("flexible (NaFlex) models")
    group.add_argument("--max-num-patches", type=patch_budget, default=None, metavar="N",
                       help="the sequence length a flexible model is exported for: images are resized to at most N "
                            "patches (SavedModel) or padded to N (TFLite); needed for a flexible model")
    group = parser.add_argument_group("ONNX")
    group.add_argument("--opset", type=int, default=None, help="ONNX opset, 13 to 18 (default: 17)")
    group = parser.add_argument_group("agreement check")
    group.add_argument(
        "--check-images", nargs="+", default=None, metavar="PATH",
        help="image files or directories to compare exported and Keras outputs on (default: random images)",
    )
    group.add_argument("--num-check-images", type=int, default=16, help="random images when --check-images is unset")
    parser.set_defaults(func=run)


def image_files(paths) -> list[str]:
    """Expand files and directories into a sorted list of image files.

    Example:
        >>> import os
        >>> from PIL import Image
        >>> os.makedirs("train_images")
        >>> for name in ("0001.jpg", "0002.png"):
        ...     Image.new("RGB", (8, 8)).save(os.path.join("train_images", name))
        >>> image_files(["train_images/"])
        ['train_images/0001.jpg', 'train_images/0002.png']
    """
    files = []
    for path in paths:
        if os.path.isdir(path):
            files.extend(
                sorted(os.path.join(path, f) for f in os.listdir(path) if f.lower().endswith(IMAGE_SUFFIXES))
            )
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise ValueError(f"{path!r} is neither an image file nor a directory")
    if not files:
        raise ValueError(f"no image files ({', '.join(IMAGE_SUFFIXES)}) found in {list(paths)}")
    return files


def _load_images(paths, size, limit=None):
    import numpy as np

    from vit_keras.cli.predict import load_image

    return np.stack([load_image(path, size) for path in image_files(paths)[:limit]])


def read_class_names(path: str) -> list[str]:
    """The class names of a text file, one per line in class-index order; a `ValueError` names the file and line
    of a blank line inside the list (it would shift every later label by one) or of a repeated name.
    Blank lines after the last name are ignored.

    Example:
        >>> with open("labels.txt", "w") as f:
        ...     _ = f.write("cat\\ndog\\n")
        >>> read_class_names("labels.txt")
        ['cat', 'dog']
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"--class-names {path!r} is not UTF-8 text ({error}); save it as UTF-8.") from None
    except OSError as error:
        raise ValueError(f"--class-names {path!r} cannot be read ({error.strerror}).") from None
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise ValueError(f"--class-names {path!r} holds no class names; write one name per line.")
    first_line = {}
    for number, name in enumerate(lines, start=1):
        if not name.strip():
            raise ValueError(
                f"--class-names {path!r} line {number} is blank: line N names class N-1, so a blank line would "
                "shift every later label by one. Remove the line (or write the missing class name there)."
            )
        if name in first_line:
            raise ValueError(f"--class-names {path!r} line {number} repeats {name!r} from line {first_line[name]}; "
                             "each class needs its own name.")
        first_line[name] = number
    return lines


def refuse_keras_quantized(model, path) -> None:
    """Raise a `ValueError` when `model` has layers quantized by Keras (`model.quantize("int8")` and the like):
    the TFLite converter cannot lower their integer kernels, and would fail deep in MLIR.

    Example:
        >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])  # any Keras model
        >>> refuse_keras_quantized(model, None)
        >>> model.quantize("int8")
        >>> refuse_keras_quantized(model, None)
        Traceback (most recent call last):
        ValueError: ...
    """
    # _flatten_layers reaches the Dense layers inside the transformer blocks, which `model.layers` does not list.
    modes = {getattr(layer, "quantization_mode", None) for layer in model._flatten_layers()} - {None}
    if modes:
        mode = sorted(modes)[0]
        raise ValueError(
            f"--keras-model {path!r} is quantized by Keras (model.quantize({mode!r})); TFLite cannot convert "
            "Keras' quantized layers. Export the float model (before model.quantize) and let the converter "
            "quantize it: --quantization dynamic_int8 (int8 weights, as model.quantize('int8')), or int8 with "
            "--calibration-images."
        )


def _mib(size_bytes) -> str:
    return f"{size_bytes / 2**20:.2f} MiB"


def run(args) -> int:
    import numpy as np

    from vit_keras import export
    from vit_keras.quantization import is_quantize_aware

    if args.export_format != "tflite" and (args.quantization or args.calibration_images or args.integer_io):
        raise ValueError("--quantization, --calibration-images and --integer-io apply to --format tflite only")
    if args.export_format != "onnx" and args.opset is not None:
        raise ValueError("--opset applies to --format onnx only")
    if args.export_format == "onnx" and not args.output.endswith(".onnx"):
        raise ValueError(f"the ONNX output should be a .onnx file, got {args.output!r}")
    if args.export_format == "tflite" and not args.output.endswith(".tflite"):
        raise ValueError(f"the TFLite output should be a .tflite file, got {args.output!r}")
    if args.export_format != "saved_model" and args.class_names:
        raise ValueError("--class-names applies to --format saved_model only")
    # Before the model is built and converted: an existing file or version directory is replaced only on request.
    if args.export_format in ("tflite", "onnx"):
        refuse_existing(args.output, args.overwrite, "--overwrite")
    else:
        refuse_existing(os.path.join(args.output, str(args.version)), args.overwrite, "--overwrite (or another "
                        "--version)")
    class_names = read_class_names(args.class_names) if args.class_names else None  # before the model is built

    model = load_or_build_model(args)
    if args.export_format == "tflite":
        refuse_keras_quantized(model, args.keras_model)
    learned_ranges = is_quantize_aware(model)  # fine-tuned with `vit-keras train --quantize-aware`
    if args.export_format == "tflite" and args.quantization == "int8" and not (args.calibration_images or
                                                                               learned_ranges):
        raise ValueError("--quantization int8 needs --calibration-images (about 100 training images), or a "
                         "--keras-model fine-tuned with `vit-keras train --quantize-aware`")
    if learned_ranges and (args.export_format != "tflite" or args.quantization != "int8"):
        raise ValueError(f"--keras-model {args.keras_model!r} is quantization-aware: export it with --format tflite "
                         "--quantization int8 (no --calibration-images); for other formats export the float model")
    if is_flexible(model):
        return _run_flexible(args, model)
    if args.max_num_patches is not None:
        raise ValueError("--max-num-patches applies to a flexible (NaFlex) model only; this model takes images of "
                         "one size. Drop it.")
    spec = export.describe_model(model.float_model if learned_ranges else model)
    size = spec.image_size
    if args.check_images:
        check_images, where = _load_images(args.check_images, size), "the given images"
    else:
        rng = np.random.default_rng(0)
        count = args.num_check_images
        check_images = rng.uniform(0, 255, (count, *size, 3)).astype(np.float32)
        where = f"{count} random images (pass --check-images for real ones)"

    if args.export_format == "saved_model":
        path = export.saved_model(
            model, args.output, version=args.version, class_names=class_names, top_k=args.top_k,
            overwrite=args.overwrite,
        )
        print(f"wrote SavedModel version {args.version} to {path} ({_mib(export.path_size(path))})")
        for name, signature in export.signature_summary(path).items():
            inputs = ", ".join(f"{k} {d}{list(s)}" for k, (d, s) in signature["inputs"].items())
            outputs = ", ".join(f"{k} {d}{list(s)}" for k, (d, s) in signature["outputs"].items())
            print(f"  signature {name}: {inputs} -> {outputs}")
        print(f"serve it: docker run -p 8501:8501 -v {os.path.abspath(args.output)}:/models/vit "
              "-e MODEL_NAME=vit tensorflow/serving")
    elif args.export_format == "onnx":
        opset = export.DEFAULT_OPSET if args.opset is None else args.opset
        path = export.to_onnx(model, args.output, opset=opset, overwrite=args.overwrite)
        print(f"wrote ONNX (opset {opset}, float32) to {path} ({_mib(os.path.getsize(path))}); "
              f"input images float32[batch, {size[0]}, {size[1]}, 3] in [0, 255]")
    else:
        calibration = None
        if args.quantization == "int8":
            calibration = _load_images(args.calibration_images, size, limit=args.calibration_samples)
        path = export.tflite(
            model, args.output, quantization=args.quantization, representative_dataset=calibration,
            max_calibration_samples=args.calibration_samples, integer_io=args.integer_io,
            overwrite=args.overwrite,
        )
        operators = export.tflite_operators(path)
        print(
            f"wrote TFLite ({args.quantization or 'float32'}) to {path} ({_mib(os.path.getsize(path))}); "
            f"{len(operators)} builtin op types, no Flex ops"
        )

    check = export.measure_agreement(model, path, check_images)
    agreement = "-" if check.top1_agreement is None else f"{100 * check.top1_agreement:.2f}%"
    print(
        f"agreement with the Keras model on {where}: top-1 {agreement}, max abs diff {check.max_abs_diff:.3g}, "
        f"mean abs diff {check.mean_abs_diff:.3g}"
    )
    return 0


def is_flexible(model) -> bool:
    """Whether `model` is a flexible (NaFlex) model: its input a dict of `patches`, `grid` and `mask`.

    Example:
        >>> import vit_keras
        >>> is_flexible(vit_keras.ViT(flexible=True, patch_size=8, hidden_size=48, num_layers=1, num_heads=3,
        ...                           mlp_dim=96, classes=2))
        True
    """
    from vit_keras.layers.flexible import INPUT_KEYS

    return isinstance(model.input, dict) and set(model.input) == set(INPUT_KEYS)


def _naflex_check_images(args, patch_size):
    """Images of their own sizes to check a flexible export on: --check-images, or random ones of three shapes."""
    import numpy as np

    from vit_keras.images import check_image_file, read_image

    if args.check_images:
        images = []
        for path in image_files(args.check_images)[: args.num_check_images]:
            width, height = check_image_file(path)[1]
            images.append(read_image(path, (height, width)))
        return images, "the given images"
    rng = np.random.default_rng(0)
    shapes = [(3 * patch_size, 7 * patch_size), (9 * patch_size, 4 * patch_size), (5 * patch_size, 5 * patch_size)]
    count = args.num_check_images
    images = [rng.uniform(0, 255, (*shapes[i % 3], 3)).astype(np.float32) for i in range(count)]
    return images, f"{count} random images of 3 aspect ratios (pass --check-images for real ones)"


def _run_flexible(args, model) -> int:
    """Export a flexible (NaFlex) model (SavedModel or TFLite of N = --max-num-patches) and check it against Keras on
    images of different aspect ratios."""
    import keras
    import numpy as np

    from vit_keras import export
    from vit_keras.images import naflex_patches
    from vit_keras.vision_transformer import config_of

    if args.export_format == "onnx":
        raise ValueError("ONNX export of a flexible (NaFlex) model is not available; use --format saved_model "
                         "(encoded images of any size) or --format tflite (a fixed number of patches).")
    if args.max_num_patches is None:
        raise ValueError("A flexible (NaFlex) model is exported for a sequence length: pass --max-num-patches N "
                         "(e.g. 256, SigLIP 2's), the most patches an image is resized to (SavedModel) or padded "
                         "to (TFLite).")
    if args.class_names:
        raise ValueError("--class-names applies to image models; a flexible model's SavedModel returns `outputs`.")
    if args.quantization == "int8":
        raise ValueError("--quantization int8 is not available for a flexible (NaFlex) model (its calibration would "
                         "need NaFlex batches); use float16 or dynamic_int8.")
    if args.integer_io:
        raise ValueError("--integer-io needs --quantization int8, which a flexible (NaFlex) model does not take.")
    patch_size = config_of(model).patch_size
    images, where = _naflex_check_images(args, patch_size)
    batch = naflex_patches(images, patch_size, args.max_num_patches)
    if not any(isinstance(layer, keras.layers.Rescaling) and layer.name == "rescaling" for layer in model.layers):
        # A model built without its preprocessing takes normalised patches: compared on [-1, 1] (SigLIP's).
        batch = {**batch, "patches": batch["patches"] / 127.5 - 1.0}
    expected = np.asarray(keras.ops.convert_to_numpy(model(batch, training=False)), np.float32)
    if args.export_format == "saved_model":
        path = export.naflex_saved_model(model, args.output, max_num_patches=args.max_num_patches,
                                         version=args.version, overwrite=args.overwrite)
        import tensorflow as tf

        serve = tf.saved_model.load(path).signatures[export.SERVING_DEFAULT]
        got = serve(**{key: tf.constant(value) for key, value in batch.items()})["outputs"].numpy()
        print(f"wrote NaFlex SavedModel version {args.version} to {path} ({_mib(export.path_size(path))}); signatures "
              f"serving_default (patches, grid, mask) and serve_bytes (encoded images, at most "
              f"{args.max_num_patches} patches each)")
    else:
        path = export.naflex_tflite(model, args.output, args.max_num_patches, quantization=args.quantization,
                                    overwrite=args.overwrite)
        got = export.naflex_tflite_predict(path, batch)
        print(f"wrote NaFlex TFLite ({args.quantization or 'float32'}) to {path} ({_mib(os.path.getsize(path))}); "
              f"inputs patches float32[1, {args.max_num_patches}, {batch['patches'].shape[-1]}], grid int32[1, 2], "
              f"mask int32[1, {args.max_num_patches}]")
    diff = np.abs(got - expected)
    print(f"agreement with the Keras model on {where}: max abs diff {diff.max():.3g}, mean abs diff {diff.mean():.3g}")
    return 0
