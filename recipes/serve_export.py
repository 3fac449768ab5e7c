"""Export a model as a SavedModel for TF Serving (step 1 of 2; `serve_query.py` is step 2).

    python recipes/serve_export.py --model runs/folder/checkpoints/best.keras --export-dir models/vit

Writes `EXPORT_DIR/1/` (`--version`), the layout TF Serving's `--model_base_path` expects, with two
signatures: `serving_default` (float32 RGB images in [0, 255] of the model's size) and `serve_bytes`
(encoded JPEG / PNG / GIF / BMP files, resized inside the graph), each answering probabilities and
the top-k classes with their labels. `--model` takes a `.keras` file (a `vit-keras train` or
`recipes/finetune_folder.py` checkpoint: its class names are served as labels) or anything
`vit_keras.from_pretrained` reads (default: timm's AugReg2 ViT-B/16 ImageNet-1k classifier, served
with the ImageNet class names).

Hardware and time: a CPU is enough; the export runs on TensorFlow. Measured on a 2-core Intel Xeon
(AVX-512, AMX) whose cores other jobs shared (load about 10), so an upper bound there: the test
suite's test of this script and `serve_query.py` (a tiny fine-tuned checkpoint exported, then three
images queried) took 53 s; the default ViT-B/16 was not timed here.
"""

import argparse
import os

import keras

import vit_keras
from vit_keras.files import refuse_existing
from vit_keras.training import local_data

DEFAULT_MODEL = "hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"a .keras file, hub id, directory or file (default {DEFAULT_MODEL})",
    )
    parser.add_argument("--export-dir", default="models/vit", help="TF Serving's model base path")
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing EXPORT_DIR/VERSION (otherwise refused)"
    )
    args = parser.parse_args(argv)

    try:  # before the model is read: an existing version folder is replaced only on request
        refuse_existing(
            os.path.join(args.export_dir, str(args.version)), args.overwrite, "--overwrite (or another --version)"
        )
    except ValueError as error:
        parser.error(str(error))

    if args.model.endswith(".keras"):
        model = keras.models.load_model(args.model, safe_mode=True)
        labels = local_data.read_labels(args.model)
        class_names = labels["class_names"] if labels else None
    else:
        model = vit_keras.from_pretrained(args.model)
        class_names = (
            [name for _, name in vit_keras.imagenet_classes()]
            if model.output_shape[-1] == 1000
            else None
        )
    path = vit_keras.export.saved_model(
        model,
        args.export_dir,
        version=args.version,
        class_names=class_names,
        top_k=min(args.top_k, model.output_shape[-1]),
        overwrite=args.overwrite,
    )
    print(f"wrote {path}")
    print(
        f'serve it: docker run -p 8501:8501 -v "$PWD/{args.export_dir}:/models/vit" -e MODEL_NAME=vit '
        "tensorflow/serving"
    )


if __name__ == "__main__":
    main()
