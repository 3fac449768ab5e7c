"""`vit-keras train`: fine-tune (or pre-train) a ViT on a tfds dataset or your own images with the paper's recipe.

Examples:
  # Fine-tune ViT-B/16 weights on CIFAR-10 at 384 px, batch 512 reached with 8 accumulation steps:
  vit-keras train --model B/16 --weights vit-b16-i21k.weights.h5 --dataset cifar10 --image-size 384 \\
      --batch-size 512 --accumulation-steps 8 --steps 10000 --learning-rate 0.03 --output-dir runs/cifar10

  # The bundled digits (no download), a tiny model, on this machine:
  vit-keras train --model Ti/16 --patch-size 2 --dataset vit_keras_digits --image-size 16 --batch-size 64 \\
      --steps 300 --warmup-steps 30 --learning-rate 0.1 --output-dir runs/digits

  # Your own images: a folder of class subfolders (or a .csv / .jsonl file of path,label rows); 10%% of them,
  # picked by a fixed shuffle, validate; the class names are kept in the checkpoints for `vit-keras predict`:
  vit-keras train --model B/16 --weights vit-b16-i21k.weights.h5 --dataset photos/ --image-size 224 \\
      --batch-size 64 --steps 500 --learning-rate 0.01 --output-dir runs/photos

  # Native aspect ratio (NaFlex): each image fit to at most 256 patches of 16x16, batches of similar lengths:
  vit-keras train --model B/16 --weights vit-b16-i21k.weights.h5 --dataset oxford_flowers102 --max-patches 256 \\
      --naflex-buckets 64 128 192 --batch-size 64 --steps 2000 --output-dir runs/flowers-naflex

  # On a TPU VM: add --tpu local. Several machines: set TF_CONFIG on each and run the same command.

Watch with `tensorboard --logdir OUTPUT_DIR/logs`. Run the same command again after an interruption: it
resumes from the last backup in OUTPUT_DIR/backup.
"""

from __future__ import annotations

import argparse
import json

from vit_keras.cli.arguments import (
    add_architecture_arguments,
    add_data_arguments,
    add_hardware_arguments,
    add_output_dir_argument,
    add_recipe_arguments,
    architecture_overrides,
    dropout_rate,
    fraction,
    non_negative_number,
    patch_budget,
    positive_int,
    recipe_overrides,
)
from vit_keras.cli.common import add_model_arguments
from vit_keras.training.config import RECIPES


def register(subparsers) -> None:
    """Add the `train` sub-command.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> build_parser().parse_args(["train", "--dataset", "cifar10", "--output-dir", "run"]).recipe
        'finetune'
    """
    parser = subparsers.add_parser(
        "train", help="fine-tune or pre-train a ViT on a tfds dataset or your own images", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(parser)
    # None: "not given", so that a given --classes is used (or refused), never silently replaced by the dataset's.
    parser.set_defaults(classes=None)
    add_architecture_arguments(parser)
    data = parser.add_argument_group("data")
    add_data_arguments(data, "cifar10, oxford_flowers102, vit_keras_digits")
    data.add_argument("--eval-split", default=None,
                      help="split evaluated after each epoch, which picks best.keras (default: the last 10%% of "
                      "--train-split, held out from training; the test split stays unseen); '' for none")
    data.add_argument("--eval-data", default=None, metavar="PATH",
                      help="validate on these images instead: a folder of class subfolders or a .csv / .jsonl file "
                      "(all of it, or --eval-split of it), labelled with --dataset's class names")
    data.add_argument("--randaugment", action=_RandAugmentAction, nargs=2, metavar=("OPS", "FACTOR"), default=None,
                      help="enable RandAugment with OPS operations of strength FACTOR in [0, 1]")
    data.add_argument("--mixup", type=non_negative_number, default=None, metavar="ALPHA",
                      help="enable MixUp with Beta(ALPHA)")
    data.add_argument("--max-patches", type=patch_budget, default=None, metavar="N",
                      help="native aspect ratio (NaFlex): train a flexible model, each image kept at its aspect "
                      "ratio and fit to at most N patches, the batch padded to N and masked (instead of --image-size)")
    data.add_argument("--naflex-buckets", type=positive_int, nargs="+", default=None, metavar="LENGTH",
                      help="with --max-patches: batch images of similar patch counts together and pad each batch "
                      "only to the smallest of these sequence lengths that holds it (N when none does), e.g. 64 128 "
                      "192: less compute spent on padding")
    recipe = parser.add_argument_group("recipe (defaults: the paper's; see vit_keras.training.finetune/pretrain)")
    recipe.add_argument("--recipe", choices=sorted(RECIPES), default="finetune",
                        help="finetune: SGD+cosine, no weight decay; pretrain: AdamW+linear, weight decay, dropout")
    add_recipe_arguments(recipe)
    recipe.add_argument("--weight-decay", type=non_negative_number, default=None)
    recipe.add_argument("--dropout", type=dropout_rate, default=None, help="dropout rate of the model, in [0, 1)")
    recipe.add_argument("--deterministic", action="store_true", help="reproducible ops and input order (slower)")
    recipe.add_argument("--lora", type=positive_int, default=None, metavar="RANK",
                        help="train LoRA adapters of this rank and the head only, every other weight frozen")
    recipe.add_argument("--lora-targets", choices=("qv", "attention", "attention+mlp"), default=None,
                        help="with --lora: query and value (default: qv), all four attention projections, or also "
                        "the MLP")
    recipe.add_argument("--quantize-aware", action="store_true",
                        help="fine-tune with the matmuls fake-quantized to int8 (from a float checkpoint: --model or "
                             "--weights), for `vit-keras export --quantization int8` without calibration images")
    add_hardware_arguments(parser.add_argument_group("hardware"))
    add_output_dir_argument(parser, "logs/, checkpoints/, backup/ and results.json")
    parser.set_defaults(func=run_train)


class _RandAugmentAction(argparse.Action):
    """--randaugment OPS FACTOR: OPS a positive integer, FACTOR a number in [0, 1] (checked as a pair, so that
    the error names which of the two is wrong)."""

    def __call__(self, parser, namespace, values, option_string=None):
        ops_text, factor_text = values
        try:
            ops = positive_int(ops_text)
        except argparse.ArgumentTypeError as error:
            raise argparse.ArgumentError(self, f"OPS {error}") from None
        try:
            factor = fraction(factor_text)
        except argparse.ArgumentTypeError as error:
            raise argparse.ArgumentError(self, f"FACTOR {error}") from None
        setattr(namespace, self.dest, (ops, factor))


def config_from_args(args):
    """The `TrainConfig` the flags describe: the recipe's defaults with every given flag applied.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> args = build_parser().parse_args(["train", "--dataset", "vit_keras_digits", "--output-dir", "run"])
        >>> config_from_args(args).optimizer
        'sgd'
    """
    overrides = recipe_overrides(args)
    extra = {"weight_decay": args.weight_decay, "dropout_rate": args.dropout, "randaugment": args.randaugment,
             "mixup_alpha": args.mixup, "max_patches": args.max_patches,
             "naflex_buckets": None if args.naflex_buckets is None else tuple(args.naflex_buckets)}
    overrides.update({key: value for key, value in extra.items() if value is not None})
    if args.deterministic:
        overrides["deterministic"] = True
    if "total_steps" in overrides and "warmup_steps" not in overrides:
        overrides["warmup_steps"] = min(RECIPES[args.recipe]().warmup_steps, overrides["total_steps"] // 10)
    return RECIPES[args.recipe](**overrides)


def run_train(args) -> int:
    import sys

    from vit_keras.cli.common import build_model, is_variant
    from vit_keras.training import data, local_data, train
    from vit_keras.training.callbacks import NonFiniteLossError

    config = config_from_args(args)
    if local_data.is_local_source(args.dataset):  # the class count, without decoding the images twice
        split = data.Split(None, len(local_data.read_examples(args.dataset)[1]), None, args.dataset)
    else:
        split = data.load(args.dataset, args.train_split, data_dir=args.data_dir)
    if args.classes is not None:
        classes = args.classes  # train() refuses a head with fewer classes than the dataset's labels
    elif split.num_classes:
        classes = split.num_classes
    else:
        raise ValueError(f"{args.dataset} does not say how many classes it has: pass --classes.")
    # A flexible (NaFlex) model takes each image at its own size: no --image-size (the config refuses both).
    image_size = None if config.max_patches else args.image_size or (224 if is_variant(args.model) else None)
    # train() checks that the model carries the recipe's dropout; it is fixed when the model is built.
    overrides = architecture_overrides(args, config)
    if config.max_patches:
        overrides["flexible"] = True

    def build():
        args.classes, args.image_size = classes, image_size
        try:
            return build_model(args, classifier_activation=None, **overrides)
        except ValueError as error:
            if not config.max_patches or "flexible" not in str(error):
                raise
            # The builder names flexible=True; on the command line that is --max-patches.
            raise ValueError(f"--max-patches {config.max_patches} trains a flexible (NaFlex) model, which --model "
                             f"{args.model}{' --weights ' + args.weights if args.weights else ''} cannot be: {error} "
                             "Drop --max-patches to train at a fixed --image-size, or pick a plain ViT.") from None

    try:
        result = train(
            build, args.dataset, config, output_dir=args.output_dir, train_split=args.train_split,
            validation_data=args.eval_data or (args.dataset if args.eval_split != "" else None),
            validation_split=args.eval_split,
            data_dir=args.data_dir, tpu=args.tpu, lora_rank=args.lora, lora_targets=args.lora_targets,
            quantize_aware=args.quantize_aware,
        )
    except NonFiniteLossError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"updates": result.updates, **result.metrics, **({"lora": result.lora} if result.lora else {})},
                     indent=2))
    return 0
