"""Flags that `train` and `pretrain` share, declared and checked once: the model's shape, the data, the
optimisation recipe, the hardware and the output directory.

Every numeric flag has an argparse type that refuses values outside its range when the command line is parsed,
so that `--num-layers 0` or `--corruption-rate 0` stop with an error naming the flag and the valid range (exit
code 2) instead of being ignored or training nothing.

Example:
    >>> parser = argparse.ArgumentParser(prog="demo", exit_on_error=False)
    >>> add_recipe_arguments(parser.add_argument_group("recipe"))
    >>> parser.parse_args(["--steps", "10"]).steps
    10
"""

from __future__ import annotations

import argparse
import math
import re

from vit_keras.training.config import PRECISIONS, SCHEDULES


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (0 and negative values are refused, not ignored).

    Example:
        >>> positive_int("4")
        4
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def patch_budget(text: str) -> int:
    """argparse type: a NaFlex patch budget (patches per image), a positive integer of at most
    `vit_keras.preprocessing.MAX_NUM_PATCHES`, refused when the command line is parsed, before anything is built.

    Example:
        >>> patch_budget("256")
        256
    """
    from vit_keras.preprocessing import check_max_num_patches

    value = positive_int(text)
    try:
        return check_max_num_patches(value, name="the patch budget")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0.

    Example:
        >>> non_negative_int("0")
        0
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value}")
    return value


def number_in(low: float, high: float | None = None, *, low_open: bool = False, high_open: bool = False):
    """argparse type: a finite float in the interval from `low` to `high` (None: no upper end); `*_open` excludes
    that end. The error states the interval in the usual notation, e.g. "(0, 1]".

    Example:
        >>> number_in(0, 1, low_open=True)("0.5")
        0.5
    """
    interval = ("(" if low_open else "[") + f"{low:g}, " + ("inf)" if high is None else
                                                            f"{high:g}" + (")" if high_open else "]"))

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number in {interval}, got {text!r}") from None
        inside = math.isfinite(value) and (value > low if low_open else value >= low)
        if high is not None:
            inside = inside and (value < high if high_open else value <= high)
        if not inside:
            raise argparse.ArgumentTypeError(f"must be a number in {interval}, got {text}")
        return value

    parse.__name__ = f"number in {interval}"
    return parse


positive_number = number_in(0, low_open=True)
non_negative_number = number_in(0)
fraction = number_in(0, 1)  # a share: 0 and 1 included
dropout_rate = number_in(0, 1, high_open=True)  # 1 would drop everything

# A Cloud TPU name (GCP resource names: lower-case letters, digits and hyphens, starting with a letter) or a
# grpc://host:port address of a TPU node.
_TPU_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_TPU_ADDRESS = re.compile(r"grpc://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})")
TPU_FORMS = "'local' (a TPU VM's own), a TPU name such as my-tpu, grpc://host:port, or 'none' (the CPU)"


def tpu_argument(text: str) -> str:
    """argparse type of `--tpu`: one of the forms `TPU_FORMS` lists; anything else is refused at once (a
    malformed name would otherwise reach TensorFlow's TPU resolver).

    Example:
        >>> tpu_argument("grpc://10.0.0.2:8470")
        'grpc://10.0.0.2:8470'
    """
    if text in ("local", "none") or _TPU_NAME.fullmatch(text):
        return text
    address = _TPU_ADDRESS.fullmatch(text)
    if address and 1 <= int(address.group(2)) <= 65535:
        return text
    raise argparse.ArgumentTypeError(f"expected {TPU_FORMS}; got {text!r}")


def add_architecture_arguments(parser) -> None:
    """`--patch-size` and `--num-layers`: override the variant's patch size and depth.

    Example:
        >>> p = argparse.ArgumentParser(); add_architecture_arguments(p)
        >>> p.parse_args(["--num-layers", "2"]).num_layers
        2
    """
    parser.add_argument("--patch-size", type=positive_int, default=None, help="override the variant's patch size")
    parser.add_argument("--num-layers", type=positive_int, default=None, help="override the variant's depth")


def add_data_arguments(group, examples: str) -> None:
    """`--dataset`, `--data-dir` and `--train-split`; `examples` lists dataset names for the help.

    Example:
        >>> p = argparse.ArgumentParser(); add_data_arguments(p, "cifar10")
        >>> p.parse_args(["--dataset", "cifar10"]).train_split
        'train'
    """
    group.add_argument("--dataset", required=True,
                       help=f"tfds name (e.g. {examples}), or your own images: a folder of class subfolders "
                       "(FOLDER/cat/001.jpg) or a .csv / .jsonl file of path,label (or path,labels: multi-label) rows")
    group.add_argument("--data-dir", default=None, help="tfds data directory (default: ~/tensorflow_datasets)")
    group.add_argument("--train-split", default="train",
                       help="tfds split string (default: train); of a folder or file: all of it, or a slice such as "
                       "'train[:50%%]' of its images in a fixed shuffled order")


def add_recipe_arguments(group, help_text: dict | None = None) -> None:
    """The optimisation flags: steps, batch, learning rate and schedule, seed and backups. `help_text` replaces
    the help of some flags (keyed by the flag, e.g. "--steps") where a recipe has its own defaults to quote.

    Example:
        >>> p = argparse.ArgumentParser(); add_recipe_arguments(p)
        >>> p.parse_args(["--learning-rate", "0.01"]).learning_rate
        0.01
    """
    help_text = {
        "--steps": "optimizer updates (total_steps)",
        "--steps-per-epoch": "updates between evaluations/checkpoints (default: all steps in one epoch)",
        "--batch-size": "global batch size per update",
        "--accumulation-steps": "split each update into this many micro-batches (same result, less memory)",
        "--learning-rate": "peak learning rate",
        "--warmup-steps": "linear warmup updates",
        **(help_text or {}),
    }
    flags = (
        ("--steps", positive_int), ("--steps-per-epoch", positive_int), ("--batch-size", positive_int),
        ("--accumulation-steps", positive_int), ("--learning-rate", positive_number),
        ("--warmup-steps", non_negative_int),
    )
    for flag, kind in flags:
        group.add_argument(flag, type=kind, default=None, help=help_text[flag])
    group.add_argument("--schedule", choices=SCHEDULES, default=None)
    group.add_argument("--seed", type=non_negative_int, default=None)
    group.add_argument("--backup-every", type=positive_int, default=None, help="steps between resume backups")


def add_hardware_arguments(group) -> None:
    """`--tpu`, `--precision` and `--no-xla`.

    Example:
        >>> p = argparse.ArgumentParser(); add_hardware_arguments(p)
        >>> p.parse_args(["--tpu", "local"]).tpu
        'local'
    """
    group.add_argument("--tpu", type=tpu_argument, default=None, metavar="TPU",
                       help="TPU to use: 'local' (a TPU VM's own, also found automatically), a TPU name or "
                       "grpc://host:port address, or 'none' to train on the CPU of a TPU VM")
    group.add_argument("--precision", choices=PRECISIONS, default=None,
                       help="auto (default): follows the hardware, see vit_keras.hardware; "
                            "VIT_KERAS_PRECISION=float32|bfloat16|float16 overrides it")
    group.add_argument("--no-xla", action="store_true", help="do not compile the train step with XLA")


def add_output_dir_argument(parser, contents: str) -> None:
    """`--output-dir`; `contents` says what the command writes there.

    Example:
        >>> p = argparse.ArgumentParser(); add_output_dir_argument(p, "logs/")
        >>> p.parse_args(["--output-dir", "run"]).output_dir
        'run'
    """
    parser.add_argument("--output-dir", required=True,
                        help=f"{contents} go here; one run at a time: a lock file refuses a second")


def recipe_overrides(args) -> dict:
    """The `TrainConfig` fields the shared flags set (only those given).

    Example:
        >>> from vit_keras.cli import build_parser
        >>> args = build_parser().parse_args(["train", "--dataset", "vit_keras_digits", "--output-dir", "run",
        ...                                   "--steps", "10"])
        >>> recipe_overrides(args)
        {'total_steps': 10}
    """
    overrides = {
        "total_steps": args.steps, "steps_per_epoch": args.steps_per_epoch, "batch_size": args.batch_size,
        "accumulation_steps": args.accumulation_steps, "learning_rate": args.learning_rate,
        "warmup_steps": args.warmup_steps, "schedule": args.schedule, "seed": args.seed,
        "backup_every": args.backup_every, "precision": args.precision, "image_size": args.image_size,
    }
    overrides = {key: value for key, value in overrides.items() if value is not None}
    if args.no_xla:
        overrides["jit_compile"] = False
    return overrides


def architecture_overrides(args, config) -> dict:
    """The keyword arguments of the model to build: the recipe's dropout (which `train` checks the model carries)
    and the given `--patch-size` / `--num-layers`.

    Example:
        >>> import argparse
        >>> from vit_keras.training import finetune
        >>> parser = argparse.ArgumentParser(); add_architecture_arguments(parser)
        >>> architecture_overrides(parser.parse_args(["--num-layers", "2"]), finetune())
        {'dropout_rate': 0.0, 'attention_dropout_rate': 0.0, 'num_layers': 2}
    """
    overrides = {"dropout_rate": config.dropout_rate, "attention_dropout_rate": config.attention_dropout_rate}
    if args.patch_size is not None:
        overrides["patch_size"] = args.patch_size
    if args.num_layers is not None:
        overrides["num_layers"] = args.num_layers
    return overrides
