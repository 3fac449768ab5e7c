"""`from_pretrained`: the model a checkpoint describes, its architecture read off the checkpoint and its config.

Example:
    >>> model = vit_keras.from_pretrained("tests/fixtures/family/hf_dinov2/checkpoint", include_top=False,
    ...                                   pooling="token")  # a transformers Dinov2Model directory
    >>> model.output_shape
    (None, 48)
"""

from __future__ import annotations

import os

from vit_keras.configs import VARIANTS, check_hw
from vit_keras.models.factory import build_from_checkpoint
from vit_keras.weights import hub, loading, registry
from vit_keras.weights.resample import check_interpolation

# What a paper variant's row states of a registered checkpoint: its shape (its dropout is for training; the model is
# built for inference).
VARIANT_SHAPE = ("patch_size", "hidden_size", "mlp_dim", "num_heads", "num_layers", "resnet")


def _registered_shape(source) -> dict:
    """The shape of a registered `"B/16:imagenet21k"`-style name's variant, as a partial config; {} for any other
    source (whose checkpoint states its architecture)."""
    entry = registry.REGISTRY.get(source) if isinstance(source, str) and ":" in source else None
    variant = None if entry is None else VARIANTS.get(entry.variant)
    return {} if variant is None else {field: getattr(variant, field) for field in VARIANT_SHAPE}


def from_pretrained(
    source,
    *,
    image_size=None,
    interpolation=None,
    include_top=None,
    pooling=None,
    classes=None,
    classifier_activation="softmax",
    include_preprocessing=True,
    input_tensor=None,
    name=None,
    sha256=None,
    cache_dir=None,
    any_image_size=None,
    head_tokens_only=False,
    revision=None,
    token=None,
    flexible=False,
):
    """Build the model a checkpoint describes and load it, exactly as its own library computes it.

    `source`: a timm Hugging Face-style directory (`config.json` with `architecture`, `model_args`,
    `pretrained_cfg` + `model.safetensors`), a transformers `save_pretrained` directory (`ViTModel`,
    `ViTForImageClassification`, `Dinov2Model`, `CLIPVisionModel`, `SiglipVisionModel`, `DINOv3ViTModel`,
    `IJepaModel`, `IJepaForImageClassification`, `Aimv2VisionModel` or an `Aimv2Model`'s vision tower), a Google
    `.npz` (incl. big_vision MAP heads), a registered name such as `"B/16:imagenet21k+imagenet2012"`, a URL of one
    of them, or a Hugging Face hub id of the directories (`"hf-hub:ORG/NAME"` or `"hf://ORG/NAME"`, `revision=` or
    `@REVISION` to pin a branch, tag or commit, `token=` for gated repositories; see `vit_keras.weights.hub`).

    Overrides: `image_size` (int or (h, w); the position embeddings are resampled: `interpolation=None` uses the
    source library's own — timm: antialiased bicubic as `resample_abs_pos_embed`, transformers: bicubic as
    `interpolate_pos_encoding`, Google: vit_jax's linear), `include_top` (None: the checkpoint's classifier where
    it has one; a checkpoint without one, e.g. a transformers `Dinov2Model`, loads as its backbone, as timm and
    transformers load it, and `include_top=True` on it is refused unless `classes` asks for a fresh head), `pooling`
    (with include_top=False:
    None for the tokens, `"token"`, `"avg"`, `"max"`, `"map"` — the checkpoint's attention-pooling head),
    `classes` (another number gives a fresh zero head), `classifier_activation`, `include_preprocessing` (True:
    the model takes RGB in [0, 255] and applies the checkpoint's own normalisation — timm `pretrained_cfg`
    mean/std, [-1, 1] otherwise). `any_image_size=True`: a model that takes any image size whose sides are
    multiples of the patch size (as timm's `dynamic_img_size` and transformers' `interpolate_pos_encoding`): the
    position embeddings stay at the checkpoint's grid and are resampled at each call with the same interpolation
    (`image_size` then only says the grid they are stored at). `head_tokens_only=True`: the last block runs for
    the class (and distillation) token only, the same outputs for less work (see `vit_keras.ViT`).
    A model without a table of absolute positions (RoPE only, e.g. DINOv3) takes any image size whose sides the
    patch size divides, as transformers runs it, without `any_image_size=True` (`image_size`, or
    `any_image_size=False` for the checkpoint's own size, fixes one); the families that do are in the example
    below, listed from the readers' rows.
    NaFlex checkpoints (transformers `Siglip2VisionModel`, timm `naflexvit_*`) have no fixed size: without
    `image_size` they give a model of any image size. `flexible=True`: a native-aspect-ratio model whose input is a
    dict of `patches`, `grid` and `mask` (a batch of images of different sizes, see `vit_keras.ViT`), the position
    embeddings resized to each image's grid with the checkpoint library's own interpolation.

    Example:
        >>> timm_dir = "tests/fixtures/family/timm_deit_distilled/checkpoint"  # config.json + model.safetensors
        >>> from_pretrained(timm_dir, image_size=64, classifier_activation=None).output_shape
        (None, 7)
        >>> from_pretrained("tests/fixtures/vitjax_token_raw/checkpoint.npz").output_shape  # a Google .npz
        (None, 7)
        >>> from_pretrained(timm_dir, any_image_size=True).input_shape
        (None, None, None, 3)
        >>> from_pretrained("tests/fixtures/family2/timm_dinov3/checkpoint").input_shape  # RoPE only: any size
        (None, None, None, 3)
        >>> from vit_keras.models.factory import any_grid_families
        >>> any_grid_families()  # the families whose checkpoints take any image size by default
        ['transformers dinov3_vit', 'timm DINOv3', 'timm RoPE-ViT', 'timm SBB RoPE ViT']
        >>> from_pretrained("tests/fixtures/family/hf_dinov2/checkpoint").output_shape  # no head: the backbone
        (None, 5, 48)

        A registered name such as `from_pretrained("B/16:imagenet21k+imagenet2012")` or a hub id
        (`"hf-hub:timm/vit_small_patch16_224.augreg_in21k"`) is downloaded on first use, then read from the cache.
        `flexible=True` gives the NaFlex form (a dict of patches, grid and mask; see `vit_keras.ViT`).
    """
    if interpolation is not None:
        check_interpolation(interpolation)
    source = hub.resolve(source, revision=revision, token=token, cache_dir=cache_dir, sha256=sha256)
    partial = _registered_shape(os.fspath(source) if isinstance(source, os.PathLike) else source)
    info = loading.describe(source, architecture=partial or None, sha256=sha256, cache_dir=cache_dir)
    if info is None:
        raise ValueError("`source` is None; pass a checkpoint directory, file, URL or registered name.")
    if info.format == "keras":
        raise ValueError(f"{info.path!r} is a Keras weights file, which does not say its architecture; build the "
                         "model with vit_keras.ViT(...) and pass weights=, or load a whole .keras model with "
                         "keras.models.load_model.")
    if info.format == "timm" and not info.architecture:
        raise ValueError(f"{info.path!r} is a bare timm state dict, which does not say its number of heads; pass "
                         "the directory timm's save_for_hf writes (config.json + model.safetensors).")
    if image_size is not None:
        partial["image_size"] = check_hw("image_size", image_size)
    if flexible and image_size is not None:
        raise ValueError("A flexible (NaFlex) model takes images of any size as patches; drop `image_size`.")
    return build_from_checkpoint(
        info, partial, interpolation=interpolation, include_top=include_top, pooling=pooling, classes=classes,
        classifier_activation=classifier_activation, include_preprocessing=include_preprocessing,
        input_tensor=input_tensor, name=name, head_tokens_only=head_tokens_only, flexible=flexible,
        any_image_size=True if info.native_aspect and image_size is None else any_image_size,
    )
