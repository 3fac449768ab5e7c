"""`vit-keras convert SRC DST`: turn any supported checkpoint into a Keras `.weights.h5` or `.keras` file.

SRC is a Google `.npz`, a timm `.safetensors` or `save_for_hf` directory, a transformers directory (ViT, DINOv2,
CLIP or SigLIP vision tower), a URL, or a registered name with `--model`: the sources `vit_keras.from_pretrained`
takes. The architecture is read off the checkpoint unless `--model` names a variant. A checkpoint whose stored
patch grid is not square needs `--source-grid ROWS,COLS`; its native image size then follows from it.
"""

from __future__ import annotations

import argparse

from vit_keras.configs import VARIANTS
from vit_keras.files import atomic_file, refuse_existing


def parse_grid(text: str) -> tuple[int, int]:
    """`--source-grid` values: "ROWS,COLS" (or "ROWSxCOLS") of positive ints.

    Example:
        >>> parse_grid("4,16")
        (4, 16)
    """
    parts = text.replace("x", ",").split(",")
    try:
        grid = tuple(int(part) for part in parts)
    except ValueError:
        grid = ()
    if len(grid) != 2 or min(grid) < 1:
        raise argparse.ArgumentTypeError(
            f"expected the checkpoint's stored patch grid as ROWS,COLS of positive ints, e.g. 14,14; got {text!r}"
        )
    return grid


def register(subparsers) -> None:
    """Add the `convert` sub-command.

    Example:
        >>> from vit_keras.cli import build_parser
        >>> build_parser().parse_args(["convert", "ViT-B_16.npz", "vit.keras"]).interpolation
        'linear'
        >>> build_parser().parse_args(["convert", "wide.npz", "vit.keras", "--source-grid", "4,16"]).source_grid
        (4, 16)
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
    parser.add_argument("--interpolation", default=None, choices=("linear", "bicubic"),
                        help="position-embedding resampling when --image-size differs: linear (vit_jax's "
                             "interpolate_posembed) or bicubic (the checkpoint library's own: timm's antialiased, "
                             "transformers' interpolate_pos_encoding); default: the source's own (linear for "
                             "Google files)")
    parser.add_argument("--source-grid", type=parse_grid, default=None, metavar="ROWS,COLS",
                        help="the checkpoint's stored patch grid, needed only when it is not square")
    parser.add_argument("--sha256", default=None, help="expected sha256 of a URL source")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing destination file")
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

    source_grid = getattr(args, "source_grid", None) or info.source_grid
    if args.model is not None:
        kwargs = VARIANTS[args.model].model_kwargs()
        kwargs["resnet"] = kwargs["resnet"].to_dict() if kwargs["resnet"] else None
        kwargs.update(classes=info.classes, representation_size=info.representation_size)
        kwargs["classifier"] = "token" if "cls" in info.read(kwargs["num_heads"]) else "gap"
        size = infer_architecture(info.read(kwargs["num_heads"]), source_grid=source_grid)["image_size"]
    else:
        if info.format == "timm":
            import numpy as np

            tensors = info.read(1)
            hidden = int(np.asarray(tensors["embedding/kernel"]).shape[-1])
            params = info.read(_timm_heads(hidden, args))
        else:
            params = info.read(None)
        kwargs = infer_architecture(params, source_grid=source_grid)
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


_PLAIN_FIELDS = {"layer_scale": False, "num_register_tokens": 0, "no_embed_class": False, "pre_norm": False,
                 "fc_norm": False, "distilled": False, "patch_bias": True}


def needs_family_builder(info) -> bool:
    """Whether the checkpoint uses an architecture switch that `vit_keras.ViT`'s paper arguments cannot express, so
    that it is converted through `vit_keras.from_pretrained`.

    Example:
        >>> needs_family_builder(describe("timm-dinov2-dir"))  # doctest: +SKIP
        True
    """
    fields = info.architecture or {}
    if not fields or info.format not in ("timm", "hf", "google_npz"):
        return False
    plain = all(fields.get(k, v) == v for k, v in _PLAIN_FIELDS.items())
    return not plain or fields.get("global_pool") == "map" or fields.get("activation") == "quick_gelu"


def _convert_family(args, info):
    from vit_keras.pretrained import from_pretrained

    fields = info.architecture
    include_top = not args.no_top and info.classes is not None
    pooling = None
    if not include_top:
        pooling = fields.get("global_pool", "token" if fields.get("class_token", True) else "avg")
    size = args.image_size
    size = None if not size else (size if len(size) == 2 else size * 2)
    return from_pretrained(args.source, image_size=size, interpolation=args.interpolation, include_top=include_top,
                           pooling=pooling, classifier_activation=None, sha256=args.sha256)


def run(args) -> int:
    from vit_keras.models import ViT
    from vit_keras.weights import describe, load_into

    destination = args.destination
    if not destination.endswith((".weights.h5", ".keras")):
        raise ValueError(f"destination {destination!r} must end in .weights.h5 or .keras")
    refuse_existing(destination, args.overwrite, "--overwrite")  # before anything is downloaded or converted
    architecture = VARIANTS[args.model].model_kwargs() if args.model else None
    info = describe(args.source, architecture=architecture, sha256=args.sha256)
    if info.format == "keras":
        raise ValueError("the source is already a Keras weights file")
    if args.model is None and args.source_grid is None and needs_family_builder(info):
        model = _convert_family(args, info)
        _write(model, destination, overwrite=args.overwrite)
        print(f"rebuild with: vit_keras.from_pretrained({args.source!r}) (the .keras file carries the architecture)")
        return 0
    kwargs = model_kwargs(args, info)
    if not kwargs["include_top"]:
        kwargs["representation_size"] = None
        kwargs["pooling"] = "token" if kwargs["classifier"] == "token" else "avg"
    kwargs.update(gelu_approximate=info.gelu_approximate, layer_norm_epsilon=info.layer_norm_epsilon,
                  classifier_activation=None)
    model = ViT(**kwargs, weights=None)
    load_into(model, info, interpolation=args.interpolation or "linear", source_grid=args.source_grid)
    _write(model, destination, overwrite=args.overwrite)
    print("rebuild with: vit_keras.ViT(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")")
    return 0


def _write(model, destination, overwrite: bool) -> None:
    with atomic_file(destination, overwrite=overwrite, flag="--overwrite") as tmp:
        if destination.endswith(".keras"):
            model.save(tmp)
        else:
            model.save_weights(tmp)
    print(f"wrote {destination} ({model.count_params():,} parameters)")
