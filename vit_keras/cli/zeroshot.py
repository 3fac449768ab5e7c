"""`vit-keras zeroshot IMAGE... --model SOURCE --labels "cat,dog,..."`: classify image files into labels given as
words, with a CLIP, SigLIP or SigLIP 2 checkpoint (a transformers directory or a hub id), and print each image's
best labels.

CLIP's scores are a softmax over the labels (they sum to 1); SigLIP's are one sigmoid per label (each on its own,
several may be high or none). `--template` (repeatable) embeds each label in prompts such as "a photo of a {}." and
averages them (the CLIP paper's prompt ensembling). Images are resized to the model's size; SigLIP 2, which takes
any size, gets each image at the size its processor would give (aspect kept, at most `--max-patches` patches).
"""

from __future__ import annotations

from vit_keras.cli.arguments import positive_int

DEFAULT_MAX_PATCHES = 256  # Siglip2ImageProcessor's default


def parse_labels(text: str) -> list[str]:
    """The comma-separated labels of `--labels`, stripped; empty or repeated labels are refused.

    Example:
        >>> parse_labels(" cat, dog ,a red car")
        ['cat', 'dog', 'a red car']
    """
    labels = [label.strip() for label in text.split(",")]
    if not text.strip() or any(not label for label in labels):
        raise ValueError(f"--labels {text!r} has an empty label; pass words separated by commas, e.g. "
                         "--labels 'cat,dog,car'.")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"--labels repeats {repeated}; give each label once.")
    return labels


def register(subparsers) -> None:
    """Add the `zeroshot` sub-command.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> build_parser().parse_args(["zeroshot", "cat.jpg", "--model", "m", "--labels", "cat,dog"]).top
        5
    """
    parser = subparsers.add_parser("zeroshot", help="classify images into labels given as words (CLIP, SigLIP)",
                                   description=__doc__)
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, BMP, GIF)")
    parser.add_argument("--model", required=True,
                        help="a transformers CLIPModel / SiglipModel / Siglip2Model directory with its tokenizer, "
                        "or its hub id (hf-hub:ORG/NAME)")
    parser.add_argument("--labels", required=True, help="the labels, separated by commas: 'cat,dog,a red car'")
    parser.add_argument("--template", action="append", default=None,
                        help="a prompt with {} for the label, e.g. 'a photo of a {}.'; repeat to average several")
    parser.add_argument("--top", type=positive_int, default=5, help="how many labels to print per image")
    parser.add_argument("--batch-size", type=positive_int, default=32, help="images classified at a time")
    parser.add_argument("--max-patches", type=positive_int, default=DEFAULT_MAX_PATCHES,
                        help="SigLIP 2: the most patches an image is resized to (default: 256)")
    parser.set_defaults(func=run)


def _load(paths, model, max_patches: int):
    import numpy as np

    from vit_keras.images import check_image_file, read_image
    from vit_keras.preprocessing import naflex_size

    if model.image_size is not None:
        return [np.stack([read_image(path, model.image_size) for path in paths])]
    # Any size: one image at a time at its own processor size.
    out = []
    for path in paths:
        width, height = check_image_file(path)[1]
        out.append(read_image(path, naflex_size(height, width, model.patch_size, max_patches))[None])
    return out


def run(args) -> int:
    import keras
    import numpy as np

    from vit_keras import zeroshot
    from vit_keras.cli.predict import batches
    from vit_keras.images import check_image_file
    from vit_keras.probabilities import probabilities

    labels = parse_labels(args.labels)
    for path in args.images:  # every file is checked (header only) before the model is read
        check_image_file(path)
    model = zeroshot.from_pretrained(args.model, flexible=False)
    if model.image_size is None and model.patch_size is None:
        raise ValueError(f"--model {args.model!r}: its vision config names no patch_size.")
    text = model.class_text_features(labels, args.template)
    top = min(args.top, len(labels))
    for paths in batches(args.images, args.batch_size):
        features = np.concatenate([model.encode_image(images) for images in _load(paths, model, args.max_patches)])
        logits = model.logits(features, text)
        scores = np.asarray(keras.ops.convert_to_numpy(probabilities(logits, model.probabilities)))
        lines = []
        for path, row in zip(paths, scores):
            lines.append(path)
            lines.extend(f"  {row[i]:8.4f}  {labels[i]}" for i in np.argsort(-row, kind="stable")[:top])
        print("\n".join(lines), flush=True)
    return 0
