"""`vit-keras pretrain`: self-supervised pre-training of a ViT on the images of a tfds dataset (labels unused).

Examples:
  # The paper's masked patch prediction (3-bit mean colour of 50% corrupted patches), scaled down:
  vit-keras pretrain --objective masked-patch --model B/16 --dataset imagenet2012 --image-size 224 \\
      --batch-size 4096 --accumulation-steps 16 --steps 100000 --output-dir runs/masked

  # The bundled digits (no download), a tiny model, on this machine:
  vit-keras pretrain --objective masked-patch --model Ti/16 --patch-size 2 --num-layers 2 \\
      --dataset vit_keras_digits --image-size 8 --batch-size 64 --steps 300 --learning-rate 1e-3 \\
      --output-dir runs/digits-masked

The pre-trained encoder is saved as OUTPUT_DIR/encoder.keras (a plain ViT without head); to fine-tune it,
`vit_keras.training.transfer_weights(keras.models.load_model("OUTPUT_DIR/encoder.keras"), classifier)` moves it
into a classifier at any resolution. Watch with `tensorboard --logdir OUTPUT_DIR/logs`; run the same command
again after an interruption to resume.
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
    fraction,
    number_in,
    positive_int,
    recipe_overrides,
)
from vit_keras.cli.common import add_model_arguments

OBJECTIVES = ("masked-patch",)
TARGET_CHOICES = {"mean-colour": "mean_colour", "downsized-colour": "downsized_colour", "pixels": "pixels"}


def register(subparsers) -> None:
    """Add the `pretrain` sub-command.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> build_parser().parse_args(["pretrain", "--dataset", "cifar10", "--output-dir", "run"]).target
        'mean-colour'
    """
    parser = subparsers.add_parser(
        "pretrain", help="self-supervised pre-training (masked patch prediction) on a tfds dataset",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--objective", choices=OBJECTIVES, default="masked-patch",
                        help="masked-patch: the paper's BERT-style masked patch prediction (§4.6)")
    add_model_arguments(parser)
    add_architecture_arguments(parser)
    task = parser.add_argument_group("masked patch prediction (defaults: the paper's)")
    task.add_argument("--target", choices=sorted(TARGET_CHOICES), default="mean-colour",
                      help="mean-colour: 3-bit mean colour (512 classes); downsized-colour: the patch pooled to "
                      "--target-grid squared 3-bit colours; pixels: L2 regression of the patch")
    task.add_argument("--target-grid", type=positive_int, default=4,
                      help="cells per side for downsized-colour (default 4)")
    # 0 would corrupt no patch: nothing to predict, so nothing to learn.
    task.add_argument("--corruption-rate", type=number_in(0, 1, low_open=True), default=0.5,
                      help="share of patches corrupted, in (0, 1] (default 0.5)")
    task.add_argument("--mask-rate", type=fraction, default=0.8, help="share of those given the [mask] embedding")
    task.add_argument("--random-rate", type=fraction, default=0.1, help="share of those given another patch")
    data = parser.add_argument_group("data")
    add_data_arguments(data, "imagenet2012, cifar10, vit_keras_digits")
    data.add_argument("--eval-split", default="", help="split whose pretext loss is evaluated each epoch")
    data.add_argument("--no-augment", action="store_true", help="plain resize: no random crop, no flip")
    recipe = parser.add_argument_group("recipe (defaults: the paper's; see vit_keras.training.masked_patch)")
    add_recipe_arguments(recipe, {
        "--steps": "optimizer updates (paper: 1M)", "--batch-size": "global batch size per update (paper: 4096)",
        "--learning-rate": "peak learning rate (paper: 2e-4)",
        "--warmup-steps": "default: 1%% of --steps, as the paper",
    })
    add_hardware_arguments(parser.add_argument_group("hardware"))
    add_output_dir_argument(parser, "logs/, checkpoints/, encoder.keras, backup/ and results.json")
    parser.set_defaults(func=run_pretrain)


def config_from_args(args):
    """The `TrainConfig` the flags describe: `masked_patch()` with every given flag applied.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> args = build_parser().parse_args(["pretrain", "--dataset", "vit_keras_digits", "--output-dir", "run"])
        >>> config_from_args(args).learning_rate
        0.0002
    """
    from vit_keras.training import masked_patch

    overrides = recipe_overrides(args)
    if args.no_augment:
        overrides.update(crop="resize", flip=False)
    return masked_patch(**overrides)


def run_pretrain(args) -> int:
    from vit_keras.cli.common import build_model
    from vit_keras.training import masked_patch_pretrain

    config = config_from_args(args)
    overrides = architecture_overrides(args, config)
    args.image_size = args.image_size or 224

    def build():
        return build_model(args, include_top=False, **overrides)

    result = masked_patch_pretrain(
        build, args.dataset, config, output_dir=args.output_dir, target=TARGET_CHOICES[args.target],
        corruption_rate=args.corruption_rate, mask_rate=args.mask_rate, random_rate=args.random_rate,
        target_grid=args.target_grid, validation_data=args.dataset if args.eval_split else None,
        train_split=args.train_split, validation_split=args.eval_split or "test", data_dir=args.data_dir,
        tpu=args.tpu,
    )
    print(json.dumps({"updates": result.updates, **result.metrics,
                      "encoder": f"{args.output_dir.rstrip('/')}/encoder.keras"}, indent=2))
    return 0
