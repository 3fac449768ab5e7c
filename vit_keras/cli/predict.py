"""`vit-keras predict IMAGE...`: classify image files and print the top classes."""

from __future__ import annotations

import sys

from vit_keras.cli.common import add_model_arguments, build_model


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
    parser.add_argument("--top", type=int, default=5, help="how many classes to print per image")
    parser.add_argument("--random-weights", action="store_true",
                        help="run without --weights (untrained: the printed classes mean nothing)")
    parser.set_defaults(func=run)


def load_image(path: str, size):
    """Decode an image file to a float32 (H, W, 3) RGB array in [0, 255], resized like vit_jax's eval; a
    `ValueError` names the file when it is missing, not JPEG/PNG/GIF/BMP, corrupt or above the pixel limit.

    Example:
        >>> load_image("cat.jpg", (224, 224)).shape  # doctest: +SKIP
        (224, 224, 3)
    """
    from vit_keras.images import read_image

    return read_image(path, size)


def run(args) -> int:
    import numpy as np

    from vit_keras.images import check_image_file
    from vit_keras.models import decode_predictions

    for path in args.images:  # every file is checked before a model is built or weights downloaded
        check_image_file(path)
    if args.weights is None and not args.random_weights:
        raise ValueError(
            "no --weights given: an untrained model prints ImageNet labels at chance (0.001 each). Pass --weights "
            "(a registered name such as imagenet21k+imagenet2012, a checkpoint file or a URL), or --random-weights "
            "to run the untrained model anyway."
        )
    if args.weights is not None and args.random_weights:
        raise ValueError("--random-weights and --weights contradict each other; pass one of them.")
    model = build_model(args)
    if args.random_weights:
        print("warning: --random-weights: the model is untrained, its predictions are meaningless", file=sys.stderr)
    size = model.input_shape[1:3]
    batch = np.stack([load_image(path, size) for path in args.images])
    scores = model.predict_on_batch(batch)
    if scores.shape[-1] == 1000:
        rows = decode_predictions(scores, top=args.top)
    else:
        rows = [[("", str(i), float(s[i])) for i in np.argsort(-s)[: args.top]] for s in scores]
    for path, row in zip(args.images, rows):
        print(path)
        for _, label, score in row:
            print(f"  {score:8.4f}  {label}")
    return 0
