"""`vit-keras evaluate`: top-1/top-5 accuracy of a model on a tfds split or your own images, and the paper's
few-shot probe. A multi-label model (trained on a file with a `labels` column) is scored by mean average precision.

Examples:
  vit-keras evaluate runs/cifar10/checkpoints/best.keras --dataset cifar10 --split test
  vit-keras evaluate runs/photos/checkpoints/best.keras --dataset photos-test/
  vit-keras evaluate --model B/16 --weights vit-b16.weights.h5 --dataset oxford_flowers102 --few-shot
"""

from __future__ import annotations

import argparse
import json

from vit_keras.cli.common import add_max_patches_argument, add_model_arguments


def register(subparsers) -> None:
    """Add the `evaluate` sub-command.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> build_parser().parse_args(["evaluate", "m.keras", "--dataset", "cifar10"]).split
        'test'
    """
    parser = subparsers.add_parser(
        "evaluate", help="accuracy and few-shot probe of a model on a tfds split or your own images",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="a .keras file (e.g. OUTPUT_DIR/checkpoints/best.keras); else --model/--weights")
    add_model_arguments(parser)
    parser.add_argument("--dataset", required=True,
                        help="tfds name (e.g. cifar10 or vit_keras_digits), or your own images: a folder of class "
                        "subfolders or a .csv / .jsonl file of path,label rows")
    parser.add_argument("--data-dir", default=None, help="tfds data directory")
    parser.add_argument("--split", default="test",
                        help="split to score (default: test); of a folder or file: all of it, or a slice such as "
                        "'train[90%%:]' (the images `vit-keras train` held out to validate)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--few-shot", action="store_true",
                        help="also run the linear few-shot probe (1, 5, 10, 25 shots from --train-split)")
    parser.add_argument("--train-split", default="train", help="split the few-shot examples come from")
    parser.add_argument("--l2-reg", type=float, default=1.0, help="ridge penalty of the few-shot probe")
    add_max_patches_argument(parser, "scores")
    parser.set_defaults(func=run_evaluate)


def run_evaluate(args) -> int:
    import os

    import keras

    from vit_keras.cli.common import build_model, naflex_patch_size
    from vit_keras.training import evaluate, few_shot_probe, local_data

    if args.few_shot and args.max_patches is not None:
        raise ValueError("--few-shot is not available for a flexible (NaFlex) model (--max-patches) yet: its probe "
                         "takes images of one size. Drop --few-shot to score the checkpoint's accuracy.")
    if args.checkpoint:
        if not os.path.isfile(args.checkpoint):
            raise ValueError(f"Checkpoint {args.checkpoint!r} does not exist.")
        model = keras.models.load_model(args.checkpoint, safe_mode=True)
        local_data.attach_labels(model, local_data.read_labels(args.checkpoint))  # images matched by class name
    else:
        model = build_model(args, **({} if args.max_patches is None else {"flexible": True}))
    naflex_patch_size(model, args.max_patches)  # the flag and the model agree, or a ValueError naming the flag
    results = evaluate(model, args.dataset, args.split, batch_size=args.batch_size, data_dir=args.data_dir,
                       max_patches=args.max_patches)
    if args.few_shot and (local_data.model_labels(model) or {}).get("multi_label"):
        raise ValueError("--few-shot scores one class per image; this model is multi-label: drop --few-shot.")
    if args.few_shot:
        results.update(few_shot_probe(model, args.dataset, args.dataset, train_split=args.train_split,
                                      test_split=args.split, l2_reg=args.l2_reg, batch_size=args.batch_size,
                                      data_dir=args.data_dir))
    print(json.dumps(results, indent=2))
    return 0
