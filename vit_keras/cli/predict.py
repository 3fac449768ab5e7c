"""`vit-keras predict IMAGE...`: classify image files and print the top classes."""

from __future__ import annotations

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
    parser.set_defaults(func=run)


def load_image(path: str, size):
    """Decode an image file to a float32 (H, W, 3) RGB array in [0, 255], resized like vit_jax's eval.

    Example:
        >>> load_image("cat.jpg", (224, 224)).shape  # doctest: +SKIP
        (224, 224, 3)
    """
    import os

    import tensorflow as tf

    if not os.path.isfile(path):
        raise ValueError(f"image file {path!r} does not exist")
    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    return tf.image.resize(tf.cast(image, tf.float32), size).numpy()


def run(args) -> int:
    import numpy as np

    from vit_keras.models import decode_predictions

    model = build_model(args)
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
