"""The `vit-keras` command line: one sub-command per module of this package.

Example:
    $ vit-keras predict cat.jpg --model B/16 --weights vit-b16.weights.h5
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module `vit_keras.cli.<name>` defines `register(subparsers)`, which adds its parser and sets
# `func`; heavy imports (TensorFlow) happen inside the command so that `--help` answers at once.
SUBCOMMANDS = ("predict", "convert", "train", "pretrain", "evaluate", "export", "inspect")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `vit-keras`, with every sub-command registered.

    Example:
        >>> build_parser().prog
        'vit-keras'
    """
    parser = argparse.ArgumentParser(
        prog="vit-keras",
        description="Vision Transformers for Keras 3: predict, train, pretrain, evaluate, export, inspect, convert.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"vit_keras.cli.{name}").register(subparsers)
    return parser


def main(argv=None) -> int:
    """Entry point of the `vit-keras` console script.

    Example:
        >>> main(["predict", "--help"])  # doctest: +SKIP
    """
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as error:
        print(f"vit-keras {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
