"""Masked patch pre-training vs training from scratch on the bundled digits, at a small fine-tuning budget.

For each seed: pre-train a tiny ViT by masked patch prediction on all 1,437 training digits *without labels*
(one run per target: mean colour, downsized colour, pixels), then fine-tune on a small labelled subset (LABELLED
per class) for FINETUNE_STEPS, and fine-tune an identical, randomly initialised ViT on the same subset for the same
steps. Reports held-out top-1 on the 360 test digits (mean ± standard deviation over seeds) and the few-shot
linear probe of each pre-trained encoder's mean patch token. Writes `docs/masked_patch_results.json`,
`docs/masked_patch.png` and prints the table of docs/pretraining.md.

The tables of docs/pretraining.md: the paper's class-token classifier with its mean-colour target
(`--targets mean_colour`, `docs/masked_patch_results.json`), and the three targets compared with a classifier on the
mean of the patch tokens (`--classifier gap`, which every pre-trained token reaches;
`docs/masked_patch_gap_results.json`).

Example:
    $ python scripts/masked_patch_experiment.py --seeds 0 1 2 --targets mean_colour
    $ python scripts/masked_patch_experiment.py --seeds 0 1 2 --classifier gap \
          --output docs/masked_patch_gap_results.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import tempfile
import time

import numpy as np

IMAGE_SIZE, PATCH_SIZE, TARGET_GRID = 16, 4, 2
TARGETS = ("mean_colour", "downsized_colour", "pixels")
COMMON = {"crop": "resize", "flip": False, "precision": "float32", "jit_compile": False, "batch_size": 64,
          "shuffle_buffer": 2048, "log_images": 4}


def build_encoder(include_top=False, pooling=None, classes=10, classifier="token"):
    import vit_keras

    return vit_keras.ViT(image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, hidden_size=96, num_layers=3, num_heads=3,
                         mlp_dim=192, include_top=include_top, pooling=pooling, classes=classes,
                         classifier=classifier, classifier_activation=None, name="vit-digits")


def labelled_subset(per_class: int, seed: int):
    import tensorflow as tf

    from vit_keras.datasets.digits import digits_arrays

    images, labels = digits_arrays("train")
    rng = np.random.default_rng(seed)
    picked = np.concatenate([rng.choice(np.flatnonzero(labels == c), per_class, replace=False) for c in range(10)])
    return tf.data.Dataset.from_tensor_slices((images[picked], labels[picked]))


def finetune(encoder, subset, steps, seed, output_dir, data_dir, learning_rate=0.03, classifier="token"):
    from vit_keras import training

    config = training.finetune(total_steps=steps, warmup_steps=steps // 10, learning_rate=learning_rate, seed=seed,
                               steps_per_epoch=steps, **{**COMMON, "log_images": 0})

    def build():
        model = build_encoder(include_top=True, classifier=classifier)
        if encoder is not None:
            training.transfer_weights(encoder, model, reset_head=True)
        return model

    result = training.train(build, subset, config, output_dir=output_dir, num_classes=10, verbose=0)
    return training.evaluate(result.model, "vit_keras_digits", "test", data_dir=data_dir)["top1"]


def few_shot(encoder, data_dir, classifier="token"):
    from vit_keras import training

    probe = build_encoder(pooling="avg", classifier=classifier)
    if encoder is not None:
        training.transfer_weights(encoder, probe)
    return training.few_shot_probe(probe, "vit_keras_digits", "vit_keras_digits", shots=(1, 5, 10),
                                   data_dir=data_dir)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=TARGETS)
    parser.add_argument("--pretrain-steps", type=int, default=2000)
    parser.add_argument("--finetune-steps", type=int, default=100)
    parser.add_argument("--labelled", type=int, default=20, help="labelled training digits per class")
    parser.add_argument("--classifier", choices=("token", "gap"), default="token",
                        help="the ViT's classifier: the paper's class token, or the mean of the patch tokens "
                        "(no class token; every token the pre-text task trains reaches the head)")
    parser.add_argument("--finetune-lr", type=float, default=0.03, help="peak SGD learning rate of fine-tuning")
    parser.add_argument("--pretrain-lr", type=float, default=1e-3, help="peak Adam learning rate of pre-training")
    parser.add_argument("--output", default="docs/masked_patch_results.json")
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--merge", nargs="+", default=None, metavar="RESULTS_JSON",
                        help="no training: combine the runs of earlier result files (e.g. seeds run in parallel "
                        "processes) into --output, with its table and plot")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.output)

    import keras

    from vit_keras import training

    classifier = args.classifier
    work = args.work_dir or tempfile.mkdtemp(prefix="masked_patch_")
    data_dir = os.path.join(work, "tfds")
    rows = []
    start = time.perf_counter()
    for seed in args.seeds:
        keras.utils.set_random_seed(seed)
        subset = labelled_subset(args.labelled, seed)
        row = {"seed": seed, "scratch": finetune(None, subset, args.finetune_steps, seed,
                                                 os.path.join(work, f"scratch{seed}"), data_dir, args.finetune_lr,
                                                 classifier)}
        keras.utils.set_random_seed(seed)
        row["few_shot_random_init"] = few_shot(build_encoder(classifier=classifier), data_dir, classifier)
        for target in args.targets:
            steps = args.pretrain_steps
            config = training.masked_patch(total_steps=steps, warmup_steps=steps // 10, learning_rate=args.pretrain_lr,
                                           seed=seed, steps_per_epoch=steps, **COMMON)
            result = training.masked_patch_pretrain(
                functools.partial(build_encoder, classifier=classifier), "vit_keras_digits", config, target=target,
                target_grid=TARGET_GRID, output_dir=os.path.join(work, f"{target}{seed}"), data_dir=data_dir, verbose=0)
            row[f"pretext_{target}"] = result.metrics
            row[f"few_shot_{target}"] = few_shot(result.encoder, data_dir, classifier)
            row[f"finetuned_{target}"] = finetune(result.encoder, subset, args.finetune_steps, seed,
                                                  os.path.join(work, f"ft_{target}{seed}"), data_dir,
                                                  args.finetune_lr, classifier)
        rows.append(row)
        print(json.dumps(row), flush=True)
        summary = {"settings": {**vars(args), "image_size": IMAGE_SIZE, "patch_size": PATCH_SIZE,
                                "target_grid": TARGET_GRID, "seconds": round(time.perf_counter() - start)},
                   "runs": rows}
        # Written after every seed: an interrupted experiment keeps the seeds it finished.
        os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
        with open(args.output + ".tmp", "w") as handle:
            json.dump(summary, handle, indent=2)
        os.replace(args.output + ".tmp", args.output)
    print(table(summary))
    plot(summary, os.path.splitext(args.output)[0].replace("_results", "") + ".png")
    return 0


def merge(paths, output) -> int:
    summaries = []
    for path in paths:
        with open(path) as handle:
            summaries.append(json.load(handle))
    runs = sorted((run for summary in summaries for run in summary["runs"]), key=lambda run: run["seed"])
    settings = dict(summaries[0]["settings"], seeds=[run["seed"] for run in runs], output=output,
                    merged_from=[os.path.basename(path) for path in paths],
                    seconds=sum(summary["settings"].get("seconds", 0) for summary in summaries))
    settings.pop("work_dir", None)  # a temporary directory of the machine that ran it
    merged = {"settings": settings, "runs": runs}
    with open(output + ".tmp", "w") as handle:
        json.dump(merged, handle, indent=2)
    os.replace(output + ".tmp", output)
    print(table(merged))
    plot(merged, os.path.splitext(output)[0].replace("_results", "") + ".png")
    return 0


def _values(runs, key, inner=None):
    return np.array([run[key][inner] if inner else run[key] for run in runs if key in run]) * 100


def table(summary) -> str:
    """The docs/pretraining.md table: held-out top-1 after fine-tuning and the 10-shot probe, mean ± std over seeds."""
    runs = summary["runs"]

    def stat(key, inner=None):
        values = _values(runs, key, inner)
        return f"{values.mean():.1f} ± {values.std():.1f} (n={len(values)})" if len(values) else "—"

    lines = ["| initialisation | fine-tuned top-1 (%) | 10-shot probe (%) | 1-shot probe (%) |", "|---|---|---|---|",
             f"| random (from scratch) | {stat('scratch')} | {stat('few_shot_random_init', '10shot')} | "
             f"{stat('few_shot_random_init', '1shot')} |"]
    for target in TARGETS:
        if any(f"finetuned_{target}" in run for run in runs):
            lines.append(f"| masked patch, {target.replace('_', ' ')} | {stat(f'finetuned_{target}')} | "
                         f"{stat(f'few_shot_{target}', '10shot')} | {stat(f'few_shot_{target}', '1shot')} |")
    return "\n".join(lines)


def plot(summary, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = summary["runs"]
    names = ["scratch"] + [t for t in TARGETS if any(f"finetuned_{t}" in run for run in runs)]
    keys = ["scratch"] + [f"finetuned_{t}" for t in names[1:]]
    values = [_values(runs, key) for key in keys]
    figure, axis = plt.subplots(figsize=(6, 3.2))
    for index, vals in enumerate(values):
        axis.scatter(np.full(len(vals), index), vals, color="grey", zorder=3, s=14)
        axis.bar(index, vals.mean(), yerr=vals.std(), color="tab:blue" if index else "tab:grey", alpha=0.7,
                 capsize=4)
    axis.set_xticks(range(len(names)), ["from scratch"] + [f"{n.replace('_', ' ')}\n(n={len(v)})"
                                                           for n, v in zip(names[1:], values[1:])])
    low = min(v.min() for v in values)
    axis.set_ylim(max(0, low - 10), 100)
    settings = summary["settings"]
    axis.set_ylabel("held-out top-1 (%)")
    axis.set_title(f"digits, {settings['labelled']} labels/class, {settings['finetune_steps']} fine-tune steps, "
                   f"classifier {settings.get('classifier', 'token')}, {len(runs)} seeds; bars: mean ± std",
                   fontsize=8)
    figure.tight_layout()
    tmp = path + ".tmp.png"
    figure.savefig(tmp, dpi=110)
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
