"""The factory behind `ViT(weights=)`, `from_pretrained` and `vit-keras convert`: a checkpoint's fields and the
caller's resolved into one `ViTConfig` (`resolve_config`), built, and the checkpoint assigned
(`build_from_checkpoint`)."""

from __future__ import annotations

from vit_keras import weights as weights_lib
from vit_keras.configs import (
    ARCHITECTURAL_POS_INTERPOLATIONS,
    DEFAULT_IMAGE_SIZE,
    ViTConfig,
    config_fields,
)
from vit_keras.models.build import build_vit, check_normalization

OPEN_FIELDS = ("activation", "layer_norm_epsilon", "pos_grid", "pos_interpolation")


def resolve_config(info, overrides: dict, *, include_top: bool = True, classes=None, interpolation=None,
                   source_grid=None, headless_representation: bool = True,
                   any_image_size: bool = False) -> ViTConfig:
    """The config of the model a checkpoint and a caller's overrides describe: one set of rules for `ViT(weights=)`,
    `from_pretrained` and `vit-keras convert`.

    `info` is a `vit_keras.weights.CheckpointInfo` (None: no checkpoint) whose `architecture` holds the fields the
    source determines; `overrides` are `ViTConfig` fields the caller chose, and win. Then:

    - `activation`, `layer_norm_epsilon` (`OPEN_FIELDS`) left out or None follow the checkpoint.
    - `image_size` left out is the checkpoint's stored size (224 when it does not say); `None` is any size, with
      `pos_grid` the checkpoint's stored grid and `pos_interpolation` the in-graph form of `interpolation`.
    - `any_image_size=True`: a model of any image size (`image_size=None`); an `image_size` in `overrides` then
      only says the grid the position embeddings are resampled to once and stored at (`pos_grid`).
    - `representation_size` left out is the checkpoint's, dropped when a fresh head replaces the checkpoint's
      (`include_top` with other `classes`), as vit_jax's `load_pretrained` fine-tunes, and without a head
      (`include_top=False`) unless `headless_representation` (True: the checkpoint's own model without its
      classifier, e.g. transformers' pooler output; `ViT()` passes False: the backbone's features); an explicit
      value (None: no representation layer) wins.
    - `interpolation` None is the source's own (`CheckpointInfo.default_interpolation`: vit_jax's linear for Google
      files, bicubic for timm and transformers).

    Example:
        >>> resolve_config(None, {"patch_size": 8, "hidden_size": 48, "num_heads": 3, "image_size": 32}).grid_size
        (4, 4)
    """
    overrides = {k: v for k, v in overrides.items() if not (k in OPEN_FIELDS and v is None)}
    unknown = sorted(set(overrides) - set(config_fields()))
    if unknown:
        raise ValueError(f"Unknown ViTConfig fields {unknown}; the fields are {list(config_fields())}.")
    interpolation = weights_lib.check_interpolation(
        interpolation or (info.default_interpolation if info is not None else "linear"))
    fields = {} if info is None else _checkpoint_fields(info, overrides, source_grid)
    fields = {k: v for k, v in fields.items() if k in config_fields()}
    if info is not None:
        for field in ("activation", "layer_norm_epsilon"):
            if fields.get(field) is None and getattr(info, field) is not None:
                fields[field] = getattr(info, field)
        if fields.get("representation_size") is None:
            fields["representation_size"] = info.representation_size
        fresh_head = include_top and classes is not None and classes != info.classes
        if fresh_head or (not include_top and not headless_representation):
            fields["representation_size"] = None
    fields = {k: v for k, v in fields.items() if v is not None or k in ("image_size", "representation_size")}
    if fields.get("image_size") is None:
        fields["image_size"] = (DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE)
    fields.update(overrides)
    # A table that is part of the architecture (bilinear_crop) stays at its stored grid and keeps its own resampling.
    architectural = fields.get("pos_interpolation") in ARCHITECTURAL_POS_INTERPOLATIONS
    if any_image_size:
        if fields["image_size"] is not None and "image_size" in overrides:  # the grid it is stored at
            stored_at = {**fields, **({} if architectural else {"pos_grid": None})}
            overrides = {**overrides, "pos_grid": ViTConfig.from_dict(stored_at).grid_size}
            fields["pos_grid"] = overrides["pos_grid"]
        fields["image_size"] = None
    if fields["image_size"] is None and info is not None:
        config = ViTConfig.from_dict({**fields, "image_size": (DEFAULT_IMAGE_SIZE,) * 2, "pos_grid": None})
        if "pos_grid" not in overrides:
            # Kept at the checkpoint's own grid: every call resamples from the stored table, as timm's
            # dynamic_img_size and transformers' interpolate_pos_encoding do.
            fields["pos_grid"] = weights_lib.stored_grid(
                info, num_heads=config.num_heads, num_embedded_prefix_tokens=config.num_embedded_prefix_tokens,
                source_grid=source_grid)
        if "pos_interpolation" not in overrides and not architectural:
            fields["pos_interpolation"] = weights_lib.grid_interpolation(info, interpolation)
    elif fields["image_size"] is None and "pos_interpolation" not in overrides and not architectural:
        fields["pos_interpolation"] = interpolation
    if fields["image_size"] is not None and not architectural:
        fields["pos_grid"] = None
    return ViTConfig.from_dict(fields)


def _checkpoint_fields(info, overrides: dict, source_grid) -> dict:
    """The fields a checkpoint determines: its config's, or read off its arrays (a Google `.npz`, whose stored grid
    `source_grid` may state; a bare timm state dict, which needs `num_heads`)."""
    if info.format == "keras":
        return {}
    fields = dict(info.architecture or {})
    if info.reader is not None and (not fields or (source_grid is not None and info.format == "google_npz")):
        num_heads = overrides.get("num_heads")
        if info.format == "timm" and num_heads is None:
            raise ValueError(f"{info.path!r} is a bare timm state dict, which does not say its number of heads; "
                             "pass num_heads, or the directory timm's save_for_hf writes (config.json + "
                             "model.safetensors).")
        fields = weights_lib.infer_config_fields(info.read(num_heads), source_grid=source_grid)
    return fields


def build_from_checkpoint(info, overrides: dict, *, config: ViTConfig | None = None, interpolation=None,
                          source_grid=None, include_top=True, pooling=None, classes=None,
                          classifier_activation="softmax", include_preprocessing=True, input_tensor=None, channels=3,
                          name=None, input_size=None, dtype=None, head_tokens_only=False,
                          headless_representation=True, flexible=False, any_image_size=False):
    """The factory behind `ViT(weights=)`, `from_pretrained` and `vit-keras convert`: resolve the config
    (`resolve_config`: the checkpoint's fields, the caller's `overrides` winning), build it (`build_vit`) and
    assign the checkpoint's parameters (`vit_keras.weights.load_into`).

    `info` is what `vit_keras.weights.describe` returns (None: random weights); `classes=None` is the checkpoint's;
    `headless_representation`, `any_image_size`: see `resolve_config`; `flexible`: a NaFlex model (see `ViT`),
    which takes any image size. Without a checkpoint,
    `config` is an already resolved config to build as it is (`ViT()` without weights resolves its own once).

    Example:
        >>> model = build_from_checkpoint(None, {"patch_size": 8, "hidden_size": 48, "num_heads": 3,
        ...                                      "num_layers": 1, "image_size": 32}, classes=10)
        >>> model.output_shape
        (None, 10)
    """
    if info is not None and channels != 3:
        raise ValueError(
            f"Pretrained weights expect RGB images (3 channels), got {channels}; pass input_shape=(H, W, 3) "
            "or weights=None."
        )
    if include_top and classes is None:
        if info is None or info.classes is None:
            where = "the checkpoint" if info is None else repr(info.path)
            raise ValueError(f"{where} has no classification head; pass include_top=False (and pooling=...) "
                             "for its embeddings, or classes=N for a fresh head.")
        classes = info.classes
    interpolation = interpolation or (info.default_interpolation if info is not None else "linear")
    if config is not None and info is not None:
        raise ValueError("`config` is a config resolved without a checkpoint; with one, pass its fields as "
                         "`overrides` so that they are resolved against it.")
    if config is None:
        config = resolve_config(info, overrides, include_top=include_top, classes=classes,
                                interpolation=interpolation, source_grid=source_grid,
                                headless_representation=headless_representation,
                                any_image_size=any_image_size or flexible)
    model = build_vit(
        config, include_top=include_top, pooling=pooling, classes=classes if classes is not None else 1000,
        classifier_activation=classifier_activation, include_preprocessing=include_preprocessing,
        normalization=None if info is None else check_normalization(info.normalization, source=info.path),
        input_tensor=input_tensor, channels=channels, name=name, input_size=input_size, dtype=dtype,
        head_tokens_only=head_tokens_only, flexible=flexible,
    )
    if info is not None:
        weights_lib.load_into(model, info, interpolation=interpolation, source_grid=source_grid)
    return model
