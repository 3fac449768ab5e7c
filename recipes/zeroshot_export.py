"""Export a zero-shot image-text model (CLIP, SigLIP, SigLIP 2) for TF Serving (step 1 of 2;
`zeroshot_query.py` is step 2).

    python recipes/zeroshot_export.py --export-dir models/zeroshot/1

Writes one SavedModel with both towers and the checkpoint's tokenizer inside the graph, so that
a client sends image files and texts as they are: `classify_image_bytes` (encoded JPEG / PNG /
GIF / BMP files and texts → logits and scores), `encode_image_bytes`, `encode_text` (texts →
features, for a retrieval index), `classify` and the token-id forms. `--labels` also stores
fixed class names (`classify_labels`, scored without sending text). Default model: SigLIP 2
B/16 at 224 px.

Hardware and time: a CPU is enough; the export runs on TensorFlow. Measured on a 2-core Intel Xeon
(AVX-512, AMX) whose cores other jobs shared (load about 10), so an upper bound there: the test
suite's run of this script on a tiny SigLIP checkpoint (served under the default hub id) took 70 s;
the default SigLIP 2 B/16 was not timed here.
"""

import argparse

from vit_keras import zeroshot
from vit_keras.files import refuse_existing
from vit_keras.zeroshot import deployment

DEFAULT_MODEL = "hf-hub:google/siglip2-base-patch16-224"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help=f"hub id or directory (default {DEFAULT_MODEL})"
    )
    parser.add_argument(
        "--export-dir",
        default="models/zeroshot/1",
        help="the SavedModel directory (TF Serving: MODEL_BASE_PATH/VERSION)",
    )
    parser.add_argument(
        "--labels", default=None, help="comma-separated class names to store (classify_labels)"
    )
    parser.add_argument(
        "--max-patches",
        type=int,
        default=None,
        help="a model of any image size (SigLIP 2 NaFlex): the most patches an image is resized to, "
        f"at its own aspect ratio (default {deployment.DEFAULT_MAX_NUM_PATCHES})",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing --export-dir (otherwise refused)"
    )
    args = parser.parse_args(argv)

    try:  # before the model is read: an existing folder is replaced only on request
        refuse_existing(args.export_dir, args.overwrite, "--overwrite")
    except ValueError as error:
        parser.error(str(error))
    model = zeroshot.from_pretrained(args.model)
    labels = [label.strip() for label in args.labels.split(",")] if args.labels else None
    any_size = model.image_size is None
    # Passed on as given (None: the exporter's default), so that a bad value is refused there, not replaced.
    path = deployment.saved_model(
        model, args.export_dir, class_names=labels, overwrite=args.overwrite, max_num_patches=args.max_patches
    )
    patches = deployment.DEFAULT_MAX_NUM_PATCHES if args.max_patches is None else args.max_patches
    context = model.context_length
    images = f", images of any size up to {patches} patches" if any_size else ""
    print(f"wrote {path} ({model.family}, {model.probabilities} scores, context {context} tokens{images})")
    base = args.export_dir.rstrip("/").rsplit("/", 1)[0]
    print(
        f'serve it: docker run -p 8501:8501 -v "$PWD/{base}:/models/zeroshot" '
        "-e MODEL_NAME=zeroshot tensorflow/serving"
    )


if __name__ == "__main__":
    main()
