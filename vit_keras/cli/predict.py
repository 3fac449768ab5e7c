"""`vit-keras predict IMAGE...`: classify image files and print the top classes.

An ImageNet model prints ImageNet's class names. A model trained on your own images (`vit-keras train --dataset
FOLDER`, then `--keras-model OUTPUT_DIR/checkpoints/best.keras`) prints the class names its checkpoint keeps, with
probabilities: softmax, or for a multi-label model one sigmoid per class. Other heads print class indices.

Images are decoded and classified `--batch-size` at a time and each batch's classes are printed as soon as it is
done, so memory stays flat however many images are given (and, with glibc, however many cores run it: see
`vit_keras.cli.memory`).
"""

from __future__ import annotations

import sys

from vit_keras.cli.arguments import positive_int
from vit_keras.cli.common import (
    add_keras_model_argument,
    add_max_patches_argument,
    add_model_arguments,
    is_variant,
    load_or_build_model,
    naflex_patch_size,
)
from vit_keras.cli.memory import map_large_blocks


def register(subparsers) -> None:
    """Add the `predict` sub-command.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> build_parser().parse_args(["predict", "cat.jpg"]).top
        5
    """
    parser = subparsers.add_parser("predict", help="classify images with a ViT", description=__doc__)
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, BMP, GIF)")
    add_model_arguments(parser)
    add_keras_model_argument(parser, "classify with")
    parser.add_argument("--top", type=positive_int, default=5, help="how many classes to print per image")
    parser.add_argument("--batch-size", type=positive_int, default=32,
                        help="images decoded and classified at a time (default: 32); memory grows with it, not "
                        "with the number of images")
    add_max_patches_argument(parser, "classifies")
    parser.add_argument("--random-weights", action="store_true",
                        help="run without --weights (untrained: the printed classes mean nothing)")
    parser.set_defaults(func=run)


def load_image(path: str, size):
    """Decode an image file to a float32 (H, W, 3) RGB array in [0, 255], resized like vit_jax's eval; a
    `ValueError` names the file when it is missing, not JPEG/PNG/GIF/BMP, corrupt or above the pixel limit.

    Example:
        >>> from PIL import Image
        >>> Image.new("RGB", (500, 375)).save("cat.jpg")
        >>> load_image("cat.jpg", (224, 224)).shape
        (224, 224, 3)
    """
    from vit_keras.images import read_image

    return read_image(path, size)


def naflex_inputs(paths, patch_size: int, max_patches: int) -> dict:
    """The NaFlex batch of image files for a flexible model: each decoded at its own size, then fit to
    `max_patches` patches as in training (`vit_keras.images.naflex_patches`).

    Example:
        >>> from PIL import Image
        >>> Image.new("RGB", (40, 16)).save("wide.png")
        >>> naflex_inputs(["wide.png"], 8, 16)["grid"].tolist()
        [[2, 5]]
    """
    from vit_keras.images import check_image_file, naflex_patches

    images = []
    for path in paths:
        width, height = check_image_file(path)[1]
        images.append(load_image(path, (height, width)))
    return naflex_patches(images, patch_size, max_patches)


def batches(items, size: int):
    """Consecutive slices of `items` of `size` (the last one shorter).

    Example:
        >>> list(batches([1, 2, 3, 4, 5], 2))
        [[1, 2], [3, 4], [5]]
    """
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _probabilities(model, scores, multi_label: bool):
    """`scores` as probabilities: a head without an activation (as `vit-keras train` builds it) outputs logits."""
    import keras
    import numpy as np

    from vit_keras.probabilities import activation_for, probabilities

    activation = getattr(model.layers[-1], "activation", None)
    if activation is not None and getattr(activation, "__name__", "linear") != "linear":
        return scores
    return np.asarray(keras.ops.convert_to_numpy(probabilities(scores, activation_for(multi_label))))


def run(args) -> int:
    import numpy as np

    from vit_keras.images import check_image_file
    from vit_keras.models import decode_predictions
    from vit_keras.training.local_data import read_labels

    for path in args.images:  # every file is checked (header only) before a model is built or weights downloaded
        check_image_file(path)
    if args.keras_model is None and args.weights is None and is_variant(args.model) and not args.random_weights:
        raise ValueError(
            "no --weights given: an untrained model prints ImageNet labels at chance (0.001 each). Pass --weights "
            "(a registered name such as imagenet21k+imagenet2012, a checkpoint file or a URL), --keras-model (a "
            "saved .keras model), or --random-weights to run the untrained model anyway."
        )
    if args.random_weights and (args.weights is not None or args.keras_model is not None):
        raise ValueError("--random-weights contradicts --weights and --keras-model; pass one of them.")
    if args.keras_model is not None and args.weights is not None:
        raise ValueError("--keras-model already holds its weights; pass --weights only with --model.")
    map_large_blocks()  # before the model's buffers and the first batch are allocated
    model = load_or_build_model(args)
    if args.random_weights:
        print("warning: --random-weights: the model is untrained, its predictions are meaningless", file=sys.stderr)
    patch = naflex_patch_size(model, args.max_patches)
    top = min(args.top, int(model.output_shape[-1]))
    labels = None if args.keras_model is None else read_labels(args.keras_model)
    if labels is not None and len(labels["class_names"]) != int(model.output_shape[-1]):
        raise ValueError(f"--keras-model {args.keras_model!r} keeps {len(labels['class_names'])} class names for a "
                         f"head of {int(model.output_shape[-1])} outputs: the file was altered; save it again from "
                         "training.")
    for paths in batches(args.images, args.batch_size):
        if patch is None:
            inputs = np.stack([load_image(path, model.input_shape[1:3]) for path in paths])
        else:
            inputs = naflex_inputs(paths, patch, args.max_patches)
        scores = np.asarray(model.predict_on_batch(inputs))
        if labels is not None:
            scores = _probabilities(model, scores, labels["multi_label"])
            rows = [[("", labels["class_names"][i], float(s[i])) for i in np.argsort(-s)[:top]] for s in scores]
        elif scores.shape[-1] == 1000:
            rows = decode_predictions(scores, top=top)
        else:
            rows = [[("", str(i), float(s[i])) for i in np.argsort(-s)[:top]] for s in scores]
        lines = []
        for path, row in zip(paths, rows):
            lines.append(path)
            lines.extend(f"  {score:8.4f}  {label}" for _, label, score in row)
        print("\n".join(lines), flush=True)
    return 0
