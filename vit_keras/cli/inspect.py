"""`vit-keras inspect IMAGE...`: write the paper's inspection figures (attention, distances, embeddings) as PNGs."""

from __future__ import annotations

import os

from vit_keras.configs import VARIANTS


def register(subparsers) -> None:
    """Add the `inspect` sub-command.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> build_parser().parse_args(["inspect", "cat.jpg", "--out", "figs"]).out
        'figs'
    """
    parser = subparsers.add_parser(
        "inspect", help="draw attention maps, attention distances, position embeddings and filters",
        description=__doc__,
    )
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, BMP, GIF)")
    parser.add_argument(
        "--model", default="B/16", metavar="VARIANT_OR_FILE",
        help=f"a paper variant ({', '.join(VARIANTS)}) or a saved .keras model file (default: B/16)",
    )
    parser.add_argument("--weights", default=None, help="weights to load into a variant (a .weights.h5 file)")
    parser.add_argument("--image-size", type=int, default=None,
                        help="square input size of a variant, or of a .keras model of any size (default: 224, or "
                             "the size its position embeddings are stored at)")
    parser.add_argument("--classes", type=int, default=1000, help="classes of a variant's head (default: 1000)")
    parser.add_argument("--layer", type=int, default=-1, help="block whose heads to draw (default: -1, the last)")
    parser.add_argument("--max-images", type=int, default=4, help="images to draw attention maps for (default: 4)")
    parser.add_argument("--out", default="inspection", help="directory for the PNG files (default: inspection)")
    parser.set_defaults(func=run)


def load_model(args):
    """The model `--model`/`--weights` name: a `.keras` file (loaded in safe mode) or a built variant.

    Example:
        >>> import vit_keras
        >>> from vit_keras.cli import build_parser
        >>> vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
        ...               classes=10).save("m.keras")
        >>> load_model(build_parser().parse_args(["inspect", "x.png", "--model", "m.keras"])).output_shape
        (None, 10)
    """
    if args.model.endswith(".keras"):
        if not os.path.isfile(args.model):
            raise ValueError(f"model file {args.model!r} does not exist")
        if args.weights is not None:
            raise ValueError("--weights applies to a variant; a .keras file already holds its weights")
        import keras

        import vit_keras.layers  # noqa: F401  (registers the layers the file refers to)

        return keras.models.load_model(args.model, safe_mode=True, compile=False)
    if args.model not in VARIANTS:
        raise ValueError(f"--model must be one of {', '.join(VARIANTS)} or a .keras file, got {args.model!r}")
    from vit_keras.cli.common import build_model

    return build_model(args)


def _rescales(model) -> bool:
    import keras

    return any(
        isinstance(layer, keras.layers.Rescaling) or (isinstance(layer, keras.Model) and _rescales(layer))
        for layer in getattr(model, "layers", [])
    )


def run(args) -> int:
    import numpy as np

    from vit_keras.cli.predict import load_image
    from vit_keras.inspection import AttentionProbe, write_figures
    from vit_keras.inspection.plots import require_matplotlib
    from vit_keras.vision_transformer import config_among

    require_matplotlib("matplotlib.figure")  # before the model loads, not after
    model = load_model(args)
    probe = AttentionProbe(model)
    height, width, _ = probe.input_shape
    if height is None or width is None:
        config = config_among([model, *model.layers])
        if config is None or probe.patches.flatten:
            raise ValueError(f"model {model.name!r} takes any image size; build it with a fixed image_size to "
                             "inspect")
        # A ViT of any size: --image-size, or the size its position embeddings are stored at.
        height, width = (args.image_size,) * 2 if args.image_size else config.reference_image_size
    images = np.stack([load_image(path, (height, width)) for path in args.images])
    if not _rescales(model):
        # Built with include_preprocessing=False: the model takes [-1, 1], not [0, 255].
        images = images / np.float32(127.5) - np.float32(1.0)
    for path in write_figures(model, images, args.out, max_images=args.max_images, layer=args.layer):
        print(path)
    return 0
