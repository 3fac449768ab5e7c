"""Arguments several sub-commands share: which model, which weights, which image size."""

from __future__ import annotations

import argparse
import os

from vit_keras.cli.arguments import patch_budget, positive_int
from vit_keras.configs import VARIANTS


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--model`, `--weights`, `--image-size` and `--classes` to a sub-command's parser.

    Example:
        >>> p = argparse.ArgumentParser(); add_model_arguments(p)
        >>> p.parse_args(["--model", "B/16"]).model
        'B/16'
    """
    parser.add_argument(
        "--model", default="B/16", metavar="MODEL",
        help=f"a paper variant, one of {', '.join(VARIANTS)} (default: B/16; weights from --weights), or a "
        "checkpoint vit_keras.from_pretrained reads, weights included: a timm or transformers directory, a hub id "
        "(hf-hub:ORG/NAME), a registered name (B/16:imagenet21k) or a .npz file (DINOv3, SigLIP, EVA-02, ...)",
    )
    parser.add_argument(
        "--weights", default=None,
        help="for a paper variant --model: a registered name (see vit_keras.list_weights()), a checkpoint file or "
        "directory, or a URL",
    )
    parser.add_argument("--image-size", type=positive_int, default=None,
                        help="square input size (default: 224 for a paper variant, a checkpoint's own size)")
    parser.add_argument("--classes", type=positive_int, default=None,
                        help="classes of the head (default: 1000 for a paper variant, a checkpoint's own head)")


def add_keras_model_argument(parser: argparse.ArgumentParser, action: str) -> None:
    """Add `--keras-model FILE.keras`: a whole saved model to `action`, instead of one `--model`/`--weights` build.

    Example:
        >>> p = argparse.ArgumentParser(); add_keras_model_argument(p, "export")
        >>> p.parse_args(["--keras-model", "vit.keras"]).keras_model
        'vit.keras'
    """
    parser.add_argument(
        "--keras-model", default=None, metavar="FILE.keras",
        help=f"a .keras file to {action} (loaded with safe_mode=True); otherwise --model/--weights build one",
    )


def build_model(args, **overrides):
    """Build the model that `add_model_arguments`' flags describe.

    Example:
        >>> parser = argparse.ArgumentParser(); add_model_arguments(parser)
        >>> build_model(parser.parse_args(["--model", "Ti/16", "--image-size", "32", "--classes", "10"])).output_shape
        (None, 10)
    """
    from vit_keras.models import ViT

    if not is_variant(args.model):
        return build_pretrained(args, **overrides)
    kwargs = {**VARIANTS[args.model].model_kwargs(), **overrides}
    size = {} if args.image_size is None else {"image_size": args.image_size}  # None: 224 (not any size)
    classes = 1000 if args.classes is None else args.classes
    return ViT(weights=args.weights, classes=classes, **size, **kwargs)


def is_variant(model: str) -> bool:
    """Whether `--model` names a paper variant (built here, weights from `--weights`), not a checkpoint.

    Example:
        >>> is_variant("B/16"), is_variant("hf-hub:facebook/dinov3-vits16-pretrain-lvd1689m")
        (True, False)
    """
    return model in VARIANTS


# Keyword arguments a paper variant takes that a checkpoint fixes itself, and the flags that set them.
_ARCHITECTURE_FLAGS = {"patch_size": "--patch-size", "num_layers": "--num-layers"}
_DROPOUT = ("dropout_rate", "attention_dropout_rate")


def build_pretrained(args, **overrides):
    """The model of a checkpoint `--model` names (anything `vit_keras.from_pretrained` reads), with `--image-size`
    and `--classes` (a fresh zero head when they differ from the checkpoint's). Architecture flags, `--weights` and
    dropout belong to paper variants and are refused here.

    Example:
        >>> parser = argparse.ArgumentParser(); add_model_arguments(parser)
        >>> timm_dir = "tests/fixtures/family/timm_deit_distilled/checkpoint"
        >>> build_pretrained(parser.parse_args(["--model", timm_dir, "--image-size", "64"])).output_shape
        (None, 7)
    """
    import vit_keras

    source = args.model
    if args.weights is not None:
        raise ValueError(f"--weights applies to a paper variant --model ({', '.join(VARIANTS)}); --model {source!r} "
                         "is a checkpoint that brings its own weights: drop --weights.")
    fixed = [flag for key, flag in _ARCHITECTURE_FLAGS.items() if overrides.pop(key, None) is not None]
    if fixed:
        raise ValueError(f"{', '.join(fixed)} applies to a paper variant --model; the checkpoint {source!r} fixes "
                         "its own architecture: drop it.")
    dropout = {key: overrides.pop(key) for key in _DROPOUT if key in overrides}
    if any(rate for rate in dropout.values()):
        raise ValueError(f"The recipe asks for dropout {dropout}, and a checkpoint --model ({source!r}) is built "
                         "without dropout: use --recipe finetune (no dropout) or a paper variant --model.")
    if not (os.path.exists(source) or ":" in source):  # a hub id, registered name and URL all hold a colon
        raise ValueError(f"--model {source!r} is neither a paper variant ({', '.join(VARIANTS)}) nor a checkpoint: "
                         "pass a checkpoint directory or file, a hub id (hf-hub:ORG/NAME) or a registered name "
                         "(see vit_keras.list_weights()).")
    # Without --image-size the checkpoint's own size: a training run and the input pipeline need a fixed one, even for
    # a model whose position encoding takes any grid (RoPE-only checkpoints load as any-size models by default).
    size = {"any_image_size": False} if args.image_size is None else {"image_size": args.image_size}
    return vit_keras.from_pretrained(source, classes=args.classes, **size, **overrides)


def load_or_build_model(args):
    """The model `--keras-model` names (loaded with `safe_mode=True`), else the one `build_model(args)` builds.

    Example:
        >>> import vit_keras
        >>> vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96,
        ...               classes=10).save("vit.keras")
        >>> parser = argparse.ArgumentParser(); add_model_arguments(parser); add_keras_model_argument(parser, "export")
        >>> load_or_build_model(parser.parse_args(["--keras-model", "vit.keras"])).output_shape
        (None, 10)
    """
    if args.keras_model is None:
        return build_model(args, **({"flexible": True} if getattr(args, "max_patches", None) else {}))
    import keras

    import vit_keras.layers  # noqa: F401  (registers the layers safe_mode loading needs)

    if not os.path.isfile(args.keras_model):
        raise ValueError(f"--keras-model {args.keras_model!r} does not exist")
    return keras.models.load_model(args.keras_model, safe_mode=True)


def add_max_patches_argument(parser: argparse.ArgumentParser, action: str) -> None:
    """Add `--max-patches N`: the patch budget a flexible (NaFlex) model `action` each image at.

    Example:
        >>> p = argparse.ArgumentParser(); add_max_patches_argument(p, "scores")
        >>> p.parse_args(["--max-patches", "256"]).max_patches
        256
    """
    parser.add_argument("--max-patches", type=patch_budget, default=None, metavar="N",
                        help=f"for a flexible (NaFlex) model: it {action} each image at its own aspect ratio, fit to "
                        "at most N patches (use the N it was trained with)")


def naflex_patch_size(model, max_patches: int | None) -> int | None:
    """The patch size of `model` when it is flexible (NaFlex), None for a model of fixed-size images; a `ValueError`
    naming `--max-patches` when the flag and the model disagree.

    Example:
        >>> import vit_keras
        >>> naflex_patch_size(vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=1, num_heads=3,
        ...                                 mlp_dim=96, classes=3), None) is None
        True
    """
    from vit_keras.naflex_data import flexible_patch_size

    patch = flexible_patch_size(model)
    if patch is not None and max_patches is None:
        raise ValueError("the model is flexible (NaFlex): it takes images at their own aspect ratio cut into patches, "
                         "so it needs --max-patches N (the patch budget per image it was trained with, e.g. 256).")
    if patch is None and max_patches is not None:
        raise ValueError(f"--max-patches {max_patches} is for a flexible (NaFlex) model, and this one takes images of "
                         f"one size {tuple(model.input_shape[1:3])}: drop --max-patches.")
    return patch
