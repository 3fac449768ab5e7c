"""Fine-tune a pretrained ViT on your own folder of images, the whole network or LoRA adapters.

    python recipes/finetune_folder.py photos --output-dir runs/photos             # full fine-tuning
    python recipes/finetune_folder.py photos --output-dir runs/photos-lora --lora 8   # LoRA, rank 8

`photos/` holds one subfolder per class (`photos/cat/1.jpg`, `photos/dog/7.png`, ...): the sorted
subfolder names are the classes. 10% of the images (the same ones every run) are held out to
validate; the best epoch is written to `OUTPUT_DIR/checkpoints/best.keras`, which keeps the class
names, and its held-out top-1 is printed. Running the same command again after an interruption
resumes where it stopped.

`--model` is the pretrained starting point (default: timm's AugReg ViT-S/16, ImageNet-21k
pre-trained); its head is replaced by a zero-initialised one for your classes. `--lora RANK` trains
low-rank adapters on every block's query and value projections and the head, every other weight
frozen; the checkpoints hold the adapters folded into plain kernels, so they load and export like
any model.

Hardware and time: a GPU, or patience on a CPU. Measured on a 2-core Intel Xeon (AVX-512, AMX),
TensorFlow, float32, CPU time while the cores were shared: one step of the default ViT-S/16 at batch
32 takes 10.3 CPU-seconds whole, 7.7 with `--lora 8`, so the default 500 steps take at least 43 min
(whole) or 32 min (LoRA) on both cores; on a GPU, see "Running on a GPU".
"""

import argparse

import vit_keras
from vit_keras import training
from vit_keras.training import local_data

DEFAULT_MODEL = "hf-hub:timm/vit_small_patch16_224.augreg_in21k"


def positive_number(text: str) -> float:
    value = float(text)
    if not value > 0:  # 0 would train nothing; NaN and negatives are no rate either
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def config_for(args):
    """The training recipe of the flags; `vit-keras train` gets the same with --learning-rate, --warmup-steps
    and --steps-per-epoch (docs/recipes/finetune-folder.md)."""
    default_rate = 0.05 if args.lora else 0.01
    return training.finetune(
        total_steps=args.steps,
        batch_size=args.batch_size,
        learning_rate=default_rate if args.learning_rate is None else args.learning_rate,
        warmup_steps=max(1, args.steps // 10),
        steps_per_epoch=max(1, args.steps // 5),  # validated 5 times
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a folder of class subfolders of images")
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"hub id, directory or file (default {DEFAULT_MODEL})",
    )
    parser.add_argument(
        "--output-dir", default="runs/folder", help="checkpoints, logs and results.json"
    )
    parser.add_argument("--steps", type=int, default=500, help="optimizer updates")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--learning-rate",
        type=positive_number,
        default=None,
        help="default: 0.01 full, 0.05 LoRA (SGD with momentum, cosine decay)",
    )
    parser.add_argument(
        "--lora", type=int, default=None, metavar="RANK", help="train LoRA adapters of this rank"
    )
    args = parser.parse_args(argv)

    _, class_names, _ = local_data.read_examples(args.folder)
    config = config_for(args)

    def build():  # called inside the distribution strategy's scope
        return vit_keras.from_pretrained(
            args.model, classes=len(class_names), classifier_activation=None
        )

    result = training.train(
        build,
        args.folder,
        config,
        output_dir=args.output_dir,
        validation_data=args.folder,
        lora_rank=args.lora,
    )
    best = f"{args.output_dir}/checkpoints/best.keras"
    if result.lora:
        lora = result.lora
        print(
            f"LoRA: rank {lora['rank']} on {lora['targets']}, {lora['trainable_parameters']:,} of "
            f"{lora['parameters']:,} weights trained (adapters and head)"
        )
    print(f"classes: {list(class_names)}")
    print(f"held-out top-1: {result.metrics['val_accuracy']:.3f}")
    print(f"best checkpoint: {best} (classes kept: {local_data.read_labels(best)['class_names']})")


if __name__ == "__main__":
    main()
