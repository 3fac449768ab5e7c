"""The `vit-keras` command line: one sub-command per module of this package.

Example:
    $ vit-keras predict cat.jpg --model B/16 --weights vit-b16.weights.h5
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Each module `vit_keras.cli.<name>` defines `register(subparsers)`, which adds its parser and sets
# `func`; heavy imports (TensorFlow) happen inside the command so that `--help` answers at once.
SUBCOMMANDS = ("predict", "convert", "train", "pretrain", "evaluate", "probe", "export", "inspect", "zeroshot")


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


def refuse_undecodable(parser: argparse.ArgumentParser, argv) -> None:
    """Stop with an argparse error (exit code 2) when an argument is not valid UTF-8.

    Python hands such bytes (e.g. a file name with byte 0xff) over as lone surrogates, which TensorFlow's file
    functions and the terminal cannot encode: they would fail later with a UnicodeEncodeError.

    Example:
        >>> refuse_undecodable(build_parser(), ["predict", "cat.jpg"])
    """
    for index, arg in enumerate(argv):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            flag = argv[index - 1] if index and argv[index - 1].startswith("-") else None
            raw = os.fsencode(arg)
            parser.error(
                f"{'argument ' + flag if flag else 'the argument'} {raw!r} is not valid UTF-8 (the file "
                f"system's bytes for that path); vit-keras reads and writes files through TensorFlow, which needs "
                f"UTF-8 paths: rename the file or directory to a UTF-8 name (e.g. with convmv), or pass a link "
                f"with a UTF-8 name."
            )


def main(argv=None) -> int:
    """Entry point of the `vit-keras` console script: exit code 0 on success, 2 for a refused argument or input,
    1 when the run failed (its output directory is in use, the loss became NaN, or an extra it needs is missing).

    Example:
        >>> main(["predict", "--help"])
        Traceback (most recent call last):
        SystemExit: 0
    """
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    refuse_undecodable(parser, argv)
    args = parser.parse_args(argv)
    from vit_keras.extras import MissingExtraError
    from vit_keras.training.lock import OutputDirLockedError

    try:
        return int(args.func(args) or 0)
    except ValueError as error:
        print(f"vit-keras {args.command}: error: {error}", file=sys.stderr)
        return 2
    except (OutputDirLockedError, MissingExtraError) as error:
        print(f"vit-keras {args.command}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
