"""Arguments several sub-commands share: which model, which weights, which image size."""

from __future__ import annotations

import argparse

from vit_keras.configs import VARIANTS


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--model`, `--weights`, `--image-size` and `--classes` to a sub-command's parser.

    Example:
        >>> p = argparse.ArgumentParser(); add_model_arguments(p)
        >>> p.parse_args(["--model", "B/16"]).model
        'B/16'
    """
    parser.add_argument(
        "--model", default="B/16", choices=sorted(VARIANTS), metavar="VARIANT",
        help=f"paper variant, one of {', '.join(VARIANTS)} (default: B/16)",
    )
    parser.add_argument(
        "--weights", default=None,
        help="a registered name (see vit_keras.list_weights()), a checkpoint file or directory, or a URL",
    )
    parser.add_argument("--image-size", type=int, default=None, help="square input size (default: 224)")
    parser.add_argument("--classes", type=int, default=1000, help="classes of the head (default: 1000)")


def build_model(args, **overrides):
    """Build the model that `add_model_arguments`' flags describe.

    Example:
        >>> build_model(parser.parse_args([]))  # doctest: +SKIP
    """
    from vit_keras.models import ViT

    kwargs = {**VARIANTS[args.model].model_kwargs(), **overrides}
    size = {} if args.image_size is None else {"image_size": args.image_size}  # None: 224 (not any size)
    return ViT(weights=args.weights, classes=args.classes, **size, **kwargs)
