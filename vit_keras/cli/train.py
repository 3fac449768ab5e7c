"""`vit-keras train`: fine-tune (or pre-train) a ViT on a tfds dataset with the paper's recipe.

Examples:
  # Fine-tune ViT-B/16 weights on CIFAR-10 at 384 px, batch 512 reached with 8 accumulation steps:
  vit-keras train --model B/16 --weights vit-b16-i21k.weights.h5 --dataset cifar10 --image-size 384 \\
      --batch-size 512 --accumulation-steps 8 --steps 10000 --learning-rate 0.03 --output-dir runs/cifar10

  # The bundled digits (no download), a tiny model, on this machine:
  vit-keras train --model Ti/16 --patch-size 2 --dataset vit_keras_digits --image-size 16 --batch-size 64 \\
      --steps 300 --warmup-steps 30 --learning-rate 0.1 --output-dir runs/digits

  # On a TPU VM: add --tpu local. Several machines: set TF_CONFIG on each and run the same command.

Watch with `tensorboard --logdir OUTPUT_DIR/logs`. Run the same command again after an interruption: it
resumes from the last backup in OUTPUT_DIR/backup.
"""

from __future__ import annotations

import argparse
import json

from vit_keras.cli.common import add_model_arguments
from vit_keras.training.config import PRECISIONS, RECIPES, SCHEDULES


def register(subparsers) -> None:
    """Add the `train` sub-command.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> build_parser().parse_args(["train", "--dataset", "cifar10", "--output-dir", "run"]).recipe
        'finetune'
    """
    parser = subparsers.add_parser(
        "train", help="fine-tune or pre-train a ViT on a tfds dataset", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(parser)
    # None: "not given", so that a given --classes is used (or refused), never silently replaced by the dataset's.
    parser.set_defaults(classes=None)
    parser.add_argument("--patch-size", type=positive_int, default=None, help="override the variant's patch size")
    parser.add_argument("--num-layers", type=positive_int, default=None, help="override the variant's depth")
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", required=True, help="tfds name, e.g. cifar10, oxford_flowers102, vit_keras_digits")
    data.add_argument("--data-dir", default=None, help="tfds data directory (default: ~/tensorflow_datasets)")
    data.add_argument("--train-split", default="train", help="tfds split string (default: train)")
    data.add_argument("--eval-split", default=None,
                      help="split evaluated after each epoch, which picks best.keras (default: the last 10%% of "
                      "--train-split, held out from training; the test split stays unseen); '' for none")
    data.add_argument("--randaugment", type=float, nargs=2, metavar=("OPS", "FACTOR"), default=None,
                      help="enable RandAugment with OPS operations of strength FACTOR (0..1)")
    data.add_argument("--mixup", type=float, default=None, metavar="ALPHA", help="enable MixUp with Beta(ALPHA)")
    recipe = parser.add_argument_group("recipe (defaults: the paper's; see vit_keras.training.finetune/pretrain)")
    recipe.add_argument("--recipe", choices=sorted(RECIPES), default="finetune",
                        help="finetune: SGD+cosine, no weight decay; pretrain: AdamW+linear, weight decay, dropout")
    recipe.add_argument("--steps", type=int, default=None, help="optimizer updates (total_steps)")
    recipe.add_argument("--steps-per-epoch", type=int, default=None,
                        help="updates between evaluations/checkpoints (default: all steps in one epoch)")
    recipe.add_argument("--batch-size", type=int, default=None, help="global batch size per update")
    recipe.add_argument("--accumulation-steps", type=int, default=None,
                        help="split each update into this many micro-batches (same result, less memory)")
    recipe.add_argument("--learning-rate", type=float, default=None)
    recipe.add_argument("--warmup-steps", type=int, default=None)
    recipe.add_argument("--schedule", choices=SCHEDULES, default=None)
    recipe.add_argument("--weight-decay", type=float, default=None)
    recipe.add_argument("--dropout", type=float, default=None, help="dropout rate of the model")
    recipe.add_argument("--seed", type=int, default=None)
    recipe.add_argument("--deterministic", action="store_true", help="reproducible ops and input order (slower)")
    recipe.add_argument("--backup-every", type=int, default=None, help="steps between resume backups")
    run = parser.add_argument_group("hardware")
    run.add_argument("--tpu", default=None,
                     help="TPU to use: 'local' (a TPU VM's own, also found automatically), a TPU name or "
                     "grpc:// address, or 'none' to train on the CPU of a TPU VM")
    run.add_argument("--precision", choices=PRECISIONS, default=None,
                     help="auto (default): follows the hardware, see vit_keras.hardware; "
                          "VIT_KERAS_PRECISION=float32|bfloat16|float16 overrides it")
    run.add_argument("--no-xla", action="store_true", help="do not compile the train step with XLA")
    parser.add_argument("--output-dir", required=True, help="logs/, checkpoints/, backup/ and results.json go here")
    parser.set_defaults(func=run_train)


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


def config_from_args(args):
    """The `TrainConfig` the flags describe: the recipe's defaults with every given flag applied.

    Example:
        >>> config_from_args(parser.parse_args([...])).optimizer  # doctest: +SKIP
        'sgd'
    """
    overrides = {
        "total_steps": args.steps, "steps_per_epoch": args.steps_per_epoch, "batch_size": args.batch_size,
        "accumulation_steps": args.accumulation_steps, "learning_rate": args.learning_rate,
        "warmup_steps": args.warmup_steps, "schedule": args.schedule, "weight_decay": args.weight_decay,
        "dropout_rate": args.dropout, "seed": args.seed, "backup_every": args.backup_every,
        "precision": args.precision, "image_size": args.image_size,
        "randaugment": tuple(args.randaugment) if args.randaugment else None, "mixup_alpha": args.mixup,
    }
    overrides = {key: value for key, value in overrides.items() if value is not None}
    if args.deterministic:
        overrides["deterministic"] = True
    if args.no_xla:
        overrides["jit_compile"] = False
    if "total_steps" in overrides and "warmup_steps" not in overrides:
        overrides["warmup_steps"] = min(RECIPES[args.recipe]().warmup_steps, overrides["total_steps"] // 10)
    return RECIPES[args.recipe](**overrides)


def run_train(args) -> int:
    import sys

    from vit_keras import data
    from vit_keras.cli.common import build_model
    from vit_keras.training import train
    from vit_keras.training.callbacks import NonFiniteLossError

    if args.image_size is not None and args.image_size < 1:
        raise ValueError(f"--image-size must be a positive integer, got {args.image_size}.")
    config = config_from_args(args)
    split = data.load(args.dataset, args.train_split, data_dir=args.data_dir)
    if args.classes is not None:
        if args.classes < 1:
            raise ValueError(f"--classes must be a positive integer, got {args.classes}.")
        classes = args.classes  # train() refuses a head with fewer classes than the dataset's labels
    elif split.num_classes:
        classes = split.num_classes
    else:
        raise ValueError(f"{args.dataset} does not say how many classes it has: pass --classes.")
    image_size = args.image_size or 224
    # train() checks that the model carries the recipe's dropout; it is fixed when the model is built.
    overrides = {"dropout_rate": config.dropout_rate, "attention_dropout_rate": config.attention_dropout_rate}
    if args.patch_size is not None:
        overrides["patch_size"] = args.patch_size
    if args.num_layers is not None:
        overrides["num_layers"] = args.num_layers

    def build():
        args.classes, args.image_size = classes, image_size
        return build_model(args, classifier_activation=None, **overrides)

    try:
        result = train(
            build, args.dataset, config, output_dir=args.output_dir, train_split=args.train_split,
            validation_data=args.dataset if args.eval_split != "" else None, validation_split=args.eval_split,
            data_dir=args.data_dir, tpu=args.tpu,
        )
    except NonFiniteLossError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"updates": result.updates, **result.metrics}, indent=2))
    return 0
