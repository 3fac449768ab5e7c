"""`vit-keras probe`: the linear probe of a frozen model (DINOv2's linear evaluation) on a tfds dataset or your own
images (a folder of class subfolders, a .csv / .jsonl file of path,label rows).

The backbone's features are computed once per split (kept under --cache-dir when given, so a second run with other
probe settings skips the backbone), a softmax logistic regression is trained on them with L2 strength and learning
rate chosen on 10% of the train split, and the test split is scored once. The result is printed and written as JSON.

Examples:
  vit-keras probe --model B/16 --weights vit-b16.weights.h5 --dataset oxford_flowers102 --cache-dir features/
  vit-keras probe runs/digits/checkpoints/best.keras --dataset vit_keras_digits --pooling token --output probe.json
  vit-keras probe --model hf-hub:facebook/dinov3-vits16-pretrain-lvd1689m --dataset photos/  # 80%% / 20%%
  vit-keras probe --model B/16 --weights vit-b16.weights.h5 --dataset photos/ --test-data test_photos/
"""


from __future__ import annotations

import argparse
import json

from vit_keras.cli.arguments import non_negative_number, positive_int, positive_number
from vit_keras.cli.common import add_model_arguments
from vit_keras.training.linear_probe import BATCH_SIZE, EPOCHS, L2_VALUES, LEARNING_RATES
from vit_keras.training.probe_features import POOLINGS

# A folder or file of your own images is one split: without --train-split / --test-split, 80% of it (a fixed
# shuffle) trains the probe and the other 20% tests it, as recipes/linear_probe.py does.
LOCAL_TRAIN_SPLIT, LOCAL_TEST_SPLIT = "train[:80%]", "train[80%:]"


def register(subparsers) -> None:
    """Add the `probe` sub-command.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> args = build_parser().parse_args(["probe", "m.keras", "--dataset", "vit_keras_digits", "--l2", "0", "1e-3"])
        >>> args.pooling, args.l2
        ('token+avg', [0.0, 0.001])
    """
    parser = subparsers.add_parser(
        "probe", help="linear probe of a frozen model's features (DINOv2's linear evaluation)", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("checkpoint", nargs="?", default=None,
                        help="a .keras file (e.g. OUTPUT_DIR/checkpoints/best.keras); else --model/--weights")
    add_model_arguments(parser)
    parser.add_argument("--dataset", required=True,
                        help="tfds name (cifar10, vit_keras_digits), a folder of class subfolders, or a .csv / .jsonl "
                             "file of path,label rows")
    parser.add_argument("--test-data", default=None, metavar="PATH",
                        help="score on these images instead (a folder or .csv / .jsonl file, all of it or "
                             "--test-split of it); its classes are matched to --dataset's by name")
    parser.add_argument("--data-dir", default=None, help="tfds data directory")
    parser.add_argument("--train-split", default=None,
                        help=f"split the probe is trained on (default: train; {LOCAL_TRAIN_SPLIT} of a folder or "
                             "file scored on itself)")
    parser.add_argument("--test-split", default=None,
                        help=f"split the probe is scored on (default: test; {LOCAL_TEST_SPLIT} of a folder or "
                             "file scored on itself, all of --test-data)")
    parser.add_argument("--pooling", default="token+avg", choices=POOLINGS,
                        help="features: the class token, the mean patch token, both concatenated (DINOv2's, the "
                             "default) or the model's own pooled output")
    parser.add_argument("--cache-dir", default=None,
                        help="keep the features there (.npz, keyed by weights, data and pooling) for later runs")
    parser.add_argument("--l2", type=non_negative_number, nargs="+", default=list(L2_VALUES),
                        help=f"L2 strengths to choose from (default: {' '.join(map(str, L2_VALUES))})")
    parser.add_argument("--learning-rate", type=positive_number, nargs="+", default=list(LEARNING_RATES),
                        help=f"Adam learning rates to choose from (default: "
                             f"{' '.join(map(str, LEARNING_RATES))})")
    parser.add_argument("--epochs", type=positive_int, default=EPOCHS,
                        help=f"epochs of each classifier (default: {EPOCHS})")
    parser.add_argument("--batch-size", type=positive_int, default=BATCH_SIZE,
                        help=f"features per step of the classifier (default: {BATCH_SIZE})")
    parser.add_argument("--feature-batch-size", type=positive_int, default=256,
                        help="images per forward pass of the backbone (default: 256)")
    parser.add_argument("--seed", type=int, default=0, help="picks the validation examples and the order of steps")
    parser.add_argument("--output", default="probe.json",
                        help="the JSON file the result is written to (default: probe.json)")
    parser.add_argument("--save-model", default=None, metavar="FILE.keras",
                        help="also save backbone + trained head as one .keras model (images in, probabilities out)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --output or --save-model file (refused otherwise, before any work)")
    parser.set_defaults(func=run_probe)


def probe_sources(args) -> tuple[str, str, str]:
    """`(test data, train split, test split)` of the flags: a folder or file of your own images scored on itself is
    cut 80% / 20%, a separate --test-data is scored whole, a tfds dataset on its train and test splits.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> from vit_keras.training import local_data
        >>> local_data.write_colour_squares("photos")
        >>> probe_sources(build_parser().parse_args(["probe", "m.keras", "--dataset", "photos"]))
        ('photos', 'train[:80%]', 'train[80%:]')
    """
    from vit_keras.training import local_data

    test_data = args.test_data or args.dataset
    one_local_source = test_data == args.dataset and local_data.is_local_source(args.dataset)
    train_split = args.train_split or (LOCAL_TRAIN_SPLIT if one_local_source else "train")
    test_split = args.test_split or (LOCAL_TEST_SPLIT if one_local_source else
                                     "train" if local_data.is_local_source(test_data) else "test")
    return test_data, train_split, test_split


def run_probe(args) -> int:
    import os

    import keras

    from vit_keras.cli.common import build_model
    from vit_keras.files import atomic_file, refuse_existing
    from vit_keras.training import linear_probe, probe_model

    if args.save_model is not None and not args.save_model.endswith(".keras"):
        raise ValueError(f"--save-model {args.save_model!r}: name a .keras file.")
    for path in (args.output, args.save_model):
        if path is not None:
            refuse_existing(path, args.overwrite, "--overwrite")
    test_data, train_split, test_split = probe_sources(args)
    if args.checkpoint:
        if not os.path.isfile(args.checkpoint):
            raise ValueError(f"Checkpoint {args.checkpoint!r} does not exist.")
        import vit_keras.layers  # noqa: F401  (registers the layers safe_mode loading needs)

        model = keras.models.load_model(args.checkpoint, safe_mode=True)
    else:
        model = build_model(args)
    result, head = linear_probe(
        model, args.dataset, test_data, train_split=train_split, test_split=test_split,
        pooling=args.pooling, cache_dir=args.cache_dir, l2_values=args.l2, learning_rates=args.learning_rate,
        epochs=args.epochs, batch_size=args.batch_size, feature_batch_size=args.feature_batch_size, seed=args.seed,
        data_dir=args.data_dir, return_head=True,
    )
    result = {"dataset": args.dataset, "train_split": train_split,
              **({"test_data": test_data} if args.test_data else {}), "test_split": test_split, **result}
    text = json.dumps(result, indent=2)
    with atomic_file(args.output, args.overwrite, "--overwrite") as tmp, open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    if args.save_model is not None:
        with atomic_file(args.save_model, args.overwrite, "--overwrite") as tmp:
            probe_model(model, head, pooling=args.pooling).save(tmp)
    print(text)
    return 0
