"""LoRA against full fine-tuning on the bundled digits: accuracy, trainable parameters, step time, peak memory.

The demo's small ViT is pre-trained at 8x8 (`vit_keras.demo.stages.pretrain`), then fine-tuned at 12x12 twice with
the demo's `finetune` recipe: every weight, and LoRA adapters plus the head (`train(..., lora_rank=...)`). Each run
is a process of its own, so that its peak resident memory (`ru_maxrss`, TensorFlow's runtime included) is its own.
Step time is the median over the run's steps of the wall time of one `train_on_batch`-sized step (Keras' batch
callbacks), the first epoch's compilation left out. Also written: the size of the adapters file of a ViT-B/16.

    python scripts/lora_vs_full.py --output-dir /tmp/lora_vs_full [--pretrain-steps 600] [--finetune-steps 300]
    python scripts/lora_vs_full.py --output-dir /tmp/lora_vs_full --only lora --lora-learning-rate 0.1  # reuses it
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np


def _child(args) -> dict:
    import keras

    from vit_keras import training
    from vit_keras.demo import stages
    from vit_keras.demo.digits import DATASET
    from vit_keras.demo.digits_model import FINETUNE_SIZE, build_demo_model

    data_dir = os.path.join(args.output_dir, "tfds")
    pretrained_path = os.path.join(args.output_dir, "pretrained.keras")
    if args.variant == "pretrain":
        model = stages.pretrain(args.output_dir, data_dir, args.pretrain_steps, args.seed)
        model.save(pretrained_path)
        return {}
    pretrained = keras.saving.load_model(pretrained_path)

    def build():
        model = build_demo_model(FINETUNE_SIZE, name="vit-digits-12px")
        training.transfer_weights(pretrained, model, reset_head=True)
        return model

    step_times, clock = [], {}

    class StepTimer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            clock["start"] = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            step_times.append(time.perf_counter() - clock["start"])

    lora_rank = args.rank if args.variant == "lora" else None
    recipe = stages.finetune_recipe(args.finetune_steps, args.seed)
    if lora_rank and args.lora_learning_rate:
        recipe = dataclasses.replace(recipe, learning_rate=args.lora_learning_rate)
    run_dir = os.path.join(args.output_dir, f"{args.variant}-lr{recipe.learning_rate:g}")
    result = training.train(build, DATASET, recipe, output_dir=run_dir, validation_data=DATASET,
                            data_dir=data_dir, verbose=0, callbacks=[StepTimer()], lora_rank=lora_rank,
                            lora_targets=args.targets)
    model = result.model
    scores = training.evaluate(model, DATASET, "test", data_dir=data_dir)
    per_epoch = max(args.finetune_steps // 4, 1)
    out = {"variant": args.variant, "top1": scores["top1"],
           "trainable": int(sum(np.prod(v.shape) for v in model.trainable_weights)),
           "total": int(sum(np.prod(v.shape) for v in model.weights)),
           "step_ms": 1000 * float(np.median(step_times[per_epoch:] or step_times)),
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if lora_rank:
        path = training.save_lora(model, os.path.join(args.output_dir, "digits-adapters.safetensors"))
        out["adapters_bytes"] = os.path.getsize(path)
    return out


def b16_adapters_bytes(rank: int, targets: str, output_dir: str) -> int:
    """Size of the adapters file of a ViT-B/16 (224 px, 1000 classes): adapters of `rank` on `targets` and head."""
    from vit_keras import training
    from vit_keras.models import ViT

    model = ViT(image_size=224, patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072,
                classes=1000)
    path = training.save_lora(training.lora(model, rank=rank, targets=targets),
                              os.path.join(output_dir, "b16-adapters.safetensors"))
    return os.path.getsize(path)


def _run(variant: str, args) -> dict:
    command = [sys.executable, __file__, "--variant", variant, "--output-dir", args.output_dir, "--rank",
               str(args.rank), "--targets", args.targets, "--pretrain-steps", str(args.pretrain_steps),
               "--finetune-steps", str(args.finetune_steps), "--seed", str(args.seed)]
    if args.lora_learning_rate:
        command += ["--lora-learning-rate", str(args.lora_learning_rate)]
    output = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--targets", default="qv", choices=("qv", "attention", "attention+mlp"))
    parser.add_argument("--pretrain-steps", type=int, default=600)
    parser.add_argument("--finetune-steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lora-learning-rate", type=float, default=None,
                        help="the LoRA run's learning rate (default: the recipe's, as the full run)")
    parser.add_argument("--only", choices=("full", "lora"), default=None, help="run only this fine-tuning")
    parser.add_argument("--variant", choices=("pretrain", "full", "lora"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    if args.variant:
        print(json.dumps(_child(args)))
        return 0
    from vit_keras.demo.stages import FINETUNE_LR

    if not os.path.exists(os.path.join(args.output_dir, "pretrained.keras")):  # reused by later invocations
        _run("pretrain", args)
    rows = [_run(variant, args) for variant in ("full", "lora") if args.only in (None, variant)]
    print("| fine-tuning | top-1 (360 test digits) | trainable / all parameters | step (ms, median) "
          "| peak RSS (MiB) |\n|---|---|---|---|---|")
    for row in rows:
        lr = args.lora_learning_rate if row["variant"] == "lora" and args.lora_learning_rate else FINETUNE_LR
        name = f"full, lr {lr}" if row["variant"] == "full" else f"LoRA r={args.rank} {args.targets}, lr {lr}"
        print(f"| {name} | {row['top1']:.2%} | {row['trainable']:,} / {row['total']:,} | {row['step_ms']:.1f} "
              f"| {row['peak_rss_mib']:.0f} |")
    adapters = [row["adapters_bytes"] for row in rows if "adapters_bytes" in row]
    digits_file = f"{adapters[0]:,} bytes" if adapters else "-"
    print(f"\ndigits adapters file: {digits_file}; ViT-B/16 adapters file (rank {args.rank}, "
          f"{args.targets}, 1000-class head): {b16_adapters_bytes(args.rank, args.targets, args.output_dir):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
