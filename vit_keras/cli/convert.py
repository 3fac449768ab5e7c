"""`vit-keras convert SRC DST`: turn any supported checkpoint into a Keras `.weights.h5` or `.keras` file.

SRC is a Google `.npz`, a timm `.safetensors`, a Hugging Face directory, a URL, or a registered name with
`--model`. The architecture is read off the checkpoint unless `--model` names a variant.
"""

from __future__ import annotations

from vit_keras.configs import VARIANTS


def register(subparsers) -> None:
    """Add the `convert` sub-command.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> build_parser().parse_args(["convert", "ViT-B_16.npz", "vit.keras"]).interpolation
        'linear'
    """
    parser = subparsers.add_parser("convert", help="convert a checkpoint to .weights.h5 or .keras",
                                   description=__doc__)
    parser.add_argument("source", help="checkpoint path, directory, URL, or registered name (with --model)")
    parser.add_argument("destination", help="output file ending in .weights.h5 or .keras")
    parser.add_argument("--model", default=None, choices=sorted(VARIANTS), metavar="VARIANT",
                        help="paper variant (default: read the architecture off the checkpoint)")
    parser.add_argument("--image-size", type=int, nargs="+", default=None, metavar="N",
                        help="input size: N or H W (default: the checkpoint's)")
    parser.add_argument("--num-heads", type=int, default=None,
                        help="attention heads (only needed for timm files of non-standard width)")
    parser.add_argument("--no-top", action="store_true", help="drop the classification head")
    parser.add_argument("--interpolation", default="linear", choices=("linear", "bicubic"),
                        help="position-embedding resampling when --image-size differs (default: vit_jax's)")
    parser.add_argument("--sha256", default=None, help="expected sha256 of a URL source")
    parser.set_defaults(func=run)


def _timm_heads(hidden, args):
    if args.num_heads:
        return args.num_heads
    for config in VARIANTS.values():
        if config.hidden_size == hidden and config.resnet is None:
            return config.num_heads
    if hidden % 64:
        raise ValueError(f"Cannot tell the number of heads of a {hidden}-wide timm model; pass --num-heads.")
    return hidden // 64


def model_kwargs(args, info) -> dict:
    """ViT keyword arguments for the converted model.

    Example:
        >>> model_kwargs(args, describe("ViT-B_16.npz"))["hidden_size"]  # doctest: +SKIP
        768
    """
    from vit_keras.weights.infer import infer_architecture

    if args.model is not None:
        kwargs = VARIANTS[args.model].model_kwargs()
        kwargs["resnet"] = kwargs["resnet"].to_dict() if kwargs["resnet"] else None
        kwargs.update(classes=info.classes, representation_size=info.representation_size)
        kwargs["classifier"] = "token" if "cls" in info.read(kwargs["num_heads"]) else "gap"
        size = infer_architecture(info.read(kwargs["num_heads"]), source_grid=info.source_grid)["image_size"]
    else:
        if info.format == "timm":
            import numpy as np

            tensors = info.read(1)
            hidden = int(np.asarray(tensors["embedding/kernel"]).shape[-1])
            params = info.read(_timm_heads(hidden, args))
        else:
            params = info.read(None)
        kwargs = infer_architecture(params, source_grid=info.source_grid)
        size = kwargs.pop("image_size")
    if args.image_size:
        size = args.image_size if len(args.image_size) == 2 else args.image_size * 2
    if size is None:
        size = [224, 224]
    if args.no_top or kwargs.get("classes") is None:
        kwargs["classes"] = 1000
        include_top = False
    else:
        include_top = True
    return {**kwargs, "image_size": list(size), "include_top": include_top}


def run(args) -> int:
    from vit_keras.models import ViT
    from vit_keras.weights import describe, load_into

    destination = args.destination
    if not destination.endswith((".weights.h5", ".keras")):
        raise ValueError(f"destination {destination!r} must end in .weights.h5 or .keras")
    architecture = VARIANTS[args.model].model_kwargs() if args.model else None
    info = describe(args.source, architecture=architecture, sha256=args.sha256)
    if info.format == "keras":
        raise ValueError("the source is already a Keras weights file")
    kwargs = model_kwargs(args, info)
    if not kwargs["include_top"]:
        kwargs["representation_size"] = None
        kwargs["pooling"] = "token" if kwargs["classifier"] == "token" else "avg"
    kwargs.update(gelu_approximate=info.gelu_approximate, layer_norm_epsilon=info.layer_norm_epsilon,
                  classifier_activation=None)
    model = ViT(**kwargs, weights=None)
    load_into(model, info, interpolation=args.interpolation)
    if destination.endswith(".keras"):
        model.save(destination)
    else:
        model.save_weights(destination)
    print(f"wrote {destination} ({model.count_params():,} parameters)")
    print("rebuild with: vit_keras.ViT(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")")
    return 0
