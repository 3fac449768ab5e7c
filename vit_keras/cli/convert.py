"""`vit-keras convert SRC DST`: turn any supported checkpoint into a Keras `.weights.h5` or `.keras` file, or
(`--to timm` / `--to transformers`) into a directory those libraries load.

SRC is a Google `.npz`, a timm `.safetensors` or `save_for_hf` directory, a transformers directory (ViT, DINOv2,
CLIP or SigLIP vision tower), a Hugging Face hub id (`hf-hub:ORG/NAME` or `hf://ORG/NAME`, `@REVISION` or
`--revision` to pin it), a URL, or a registered name with `--model`: the sources `vit_keras.from_pretrained` takes.
The architecture is read off the checkpoint unless `--model` names a variant. A checkpoint whose stored patch grid
is not square needs `--source-grid ROWS,COLS`; its native image size then follows from it.
"""

from __future__ import annotations

import argparse
import os

from vit_keras.configs import VARIANTS, ResNetConfig
from vit_keras.files import atomic_file, refuse_existing
from vit_keras.vision_transformer import config_of


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
        >>> build_parser().parse_args(["convert", "ViT-B_16.npz", "vit.keras"]).interpolation is None  # the source's
        True
        >>> build_parser().parse_args(["convert", "wide.npz", "vit.keras", "--source-grid", "4,16"]).source_grid
        (4, 16)
    """
    parser = subparsers.add_parser("convert", help="convert a checkpoint to .weights.h5, .keras, or a timm / "
                                   "transformers directory", description=__doc__)
    parser.add_argument("source", help="checkpoint path, directory, hub id, URL, or registered name (with --model)")
    parser.add_argument("destination", help="output file ending in .weights.h5 or .keras; a directory with --to")
    parser.add_argument("--to", default="keras", choices=TARGETS,
                        help="keras (the destination's suffix picks .weights.h5 or .keras), or a directory that "
                             "timm (create_model + load_state_dict(strict=True)) or transformers (AutoModel."
                             "from_pretrained) loads")
    parser.add_argument("--revision", default=None,
                        help="branch, tag or commit of a hub id source (same as SRC@REVISION)")
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


TARGETS = ("keras", "timm", "transformers")


def _timm_heads(hidden, args):
    if args.num_heads:
        return args.num_heads
    for config in VARIANTS.values():
        if config.hidden_size == hidden and config.resnet is None:
            return config.num_heads
    if hidden % 64:
        raise ValueError(f"Cannot tell the number of heads of a {hidden}-wide timm model; pass --num-heads.")
    return hidden // 64


def overrides_for(args, info) -> dict:
    """The `ViTConfig` fields the command line chooses (`--model`, `--image-size`, `--num-heads`); every other
    field is the checkpoint's (`vit_keras.models.resolve_config`).

    Example:
        >>> from vit_keras.cli import build_parser
        >>> from vit_keras.weights import describe
        >>> npz = "tests/fixtures/vitjax_token_raw/checkpoint.npz"
        >>> overrides_for(build_parser().parse_args(["convert", npz, "b.keras", "--image-size", "384"]), describe(npz))
        {'image_size': (384, 384)}
    """
    overrides = {}
    if args.model is not None:
        # The variant's shape; the converted model is for inference, so the row's dropout is left out.
        overrides.update({k: v for k, v in VARIANTS[args.model].model_kwargs().items()
                          if k not in ("dropout_rate", "attention_dropout_rate")})
    if args.num_heads:
        overrides["num_heads"] = args.num_heads
    if info.format == "timm" and not info.architecture and "num_heads" not in overrides:
        hidden = int(info.read(1)["embedding/kernel"].shape[-1])
        overrides["num_heads"] = _timm_heads(hidden, args)
    if args.image_size:
        size = args.image_size
        overrides["image_size"] = tuple(size) if len(size) == 2 else (size[0], size[0])
    return overrides


def rebuild_call(config, *, include_top: bool, pooling, classes: int) -> str:
    """The `vit_keras.ViT(...)` call that rebuilds a converted model (to load its `.weights.h5` into).

    Example:
        >>> from vit_keras.configs import VARIANTS, ResNetConfig
        >>> rebuild_call(VARIANTS["S/32"].replace(layer_norm_epsilon=1e-12), include_top=True, pooling=None,
        ...              classes=10)
        'vit_keras.ViT(patch_size=32, hidden_size=384, mlp_dim=1536, num_heads=6, layer_norm_epsilon=1e-12, \
classes=10, classifier_activation=None)'
    """
    kwargs = {k: v.to_dict() if isinstance(v, ResNetConfig) else v for k, v in config.model_kwargs().items()}
    kwargs.update({"classes": classes} if include_top else {"include_top": False, "pooling": pooling})
    kwargs["classifier_activation"] = None
    return "vit_keras.ViT(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"


def run(args) -> int:
    from vit_keras.models import build_from_checkpoint, resolve_config
    from vit_keras.weights import describe, hub

    destination = args.destination
    if args.to == "keras" and not destination.endswith((".weights.h5", ".keras")):
        raise ValueError(f"destination {destination!r} must end in .weights.h5 or .keras (or pass --to timm or "
                         "--to transformers for a directory)")
    if args.to == "keras":
        refuse_existing(destination, args.overwrite, "--overwrite")  # before anything is downloaded or converted
    elif os.path.isfile(destination) or (os.path.isdir(destination) and os.listdir(destination)
                                         and not args.overwrite):
        what = "a file" if os.path.isfile(destination) else "a directory that is not empty"
        raise ValueError(f"destination {destination!r} is {what}; --to {args.to} writes a directory: pass a new "
                         "path" + ("" if os.path.isfile(destination) else ", or --overwrite to replace it"))
    architecture = VARIANTS[args.model].to_dict() if args.model else None
    source = hub.resolve(args.source, revision=args.revision)
    info = describe(source, architecture=architecture, sha256=args.sha256)
    if info.format == "keras":
        raise ValueError("the source is already a Keras weights file")
    overrides = overrides_for(args, info)
    include_top = not args.no_top and info.classes is not None
    pooling = None
    if not include_top:
        pooling = resolve_config(info, overrides, include_top=False, source_grid=args.source_grid).global_pool
    model = build_from_checkpoint(info, overrides, interpolation=args.interpolation, source_grid=args.source_grid,
                                  include_top=include_top, pooling=pooling, classes=None if include_top else 1000,
                                  classifier_activation=None)
    if args.to != "keras":
        from vit_keras.weights.save import save_pretrained

        save_pretrained(model, destination, format=args.to, overwrite=args.overwrite)
        print(f"wrote {destination} ({model.count_params():,} parameters) for {args.to}")
        return 0
    _write(model, destination, overwrite=args.overwrite)
    config = config_of(model)
    print("rebuild with: " + rebuild_call(config, include_top=include_top, pooling=pooling,
                                          classes=model.output_shape[-1]))
    print(f"or read the checkpoint again: vit_keras.from_pretrained({args.source!r}); a .keras file carries the "
          "architecture: keras.saving.load_model")
    return 0


def _write(model, destination, overwrite: bool) -> None:
    with atomic_file(destination, overwrite=overwrite, flag="--overwrite") as tmp:
        if destination.endswith(".keras"):
            model.save(tmp)
        else:
            model.save_weights(tmp)
    print(f"wrote {destination} ({model.count_params():,} parameters)")
