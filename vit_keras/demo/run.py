"""`python -m vit_keras.demo`: pre-train a small ViT on the bundled digits, fine-tune it at a higher resolution.

The command line that runs the stages (`vit_keras.demo.stages`), the score (`vit_keras.demo.report`) and the demo
steps (`vit_keras.demo.steps`) in turn.

Example:
    >>> build_parser().parse_args([]).output_dir
    'demo_output'
"""

from __future__ import annotations

import argparse
import os
import time

from vit_keras.demo import report, stages, steps
from vit_keras.demo.digits import test_arrays
from vit_keras.demo.digits_model import FINETUNE_SIZE, PRETRAIN_SIZE


def build_parser() -> argparse.ArgumentParser:
    """The demo's command line.

    Example:
        >>> build_parser().parse_args(["--seed", "3"]).seed
        3
    """
    parser = argparse.ArgumentParser(prog="python -m vit_keras.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="demo_output")
    parser.add_argument("--data-dir", default=None, help="tfds data directory (default: <output-dir>/tfds)")
    parser.add_argument("--pretrain-steps", type=_positive_int, default=stages.PRETRAIN_STEPS)
    parser.add_argument("--finetune-steps", type=_positive_int, default=stages.FINETUNE_STEPS)
    parser.add_argument("--seed", type=int, default=0, help="seed of initialisation, shuffling and dropout")
    parser.add_argument("--threads", type=_positive_int, default=None,
                        help="TensorFlow intra-op threads (default: TF_NUM_INTRAOP_THREADS or all cores)")
    parser.add_argument("--train-only", action="store_true",
                        help="train and score only: skip the save/reload, export and inspection steps")
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def main(argv=None) -> int:
    """Run the demo; 0 when the held-out top-1 accuracy reaches the bar (`report.ACCURACY_BAR`), else 1."""
    args = build_parser().parse_args(argv)

    import tensorflow as tf

    if args.threads:
        # Before any op runs: TensorFlow fixes its thread pools when it first executes something.
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)

    os.makedirs(args.output_dir, exist_ok=True)
    data_dir = args.data_dir or os.path.join(args.output_dir, "tfds")
    start = time.perf_counter()
    low = stages.pretrain(args.output_dir, data_dir, args.pretrain_steps, args.seed)
    print(f"pre-trained at {PRETRAIN_SIZE}x{PRETRAIN_SIZE} ({time.perf_counter() - start:.0f} s)")
    model = stages.finetune(low, args.output_dir, data_dir, args.finetune_steps, args.seed)
    train_seconds = time.perf_counter() - start

    passed = report.score(model, data_dir, seed=args.seed, train_seconds=train_seconds, output_dir=args.output_dir)

    if not args.train_only:
        test_images, test_labels = test_arrays(FINETUNE_SIZE, data_dir)
        train_images, _ = test_arrays(FINETUNE_SIZE, data_dir, split_name="train")
        demo_data = steps.DemoData(test_images, test_labels, train_images)
        for step in steps.DEMO_STEPS:
            step(model, demo_data, args.output_dir)
    return 0 if passed else 1
