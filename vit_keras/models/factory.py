"""The factory behind `ViT()`, `from_pretrained` and `vit-keras convert`: the caller's partial config (the `ViTConfig`
fields it chose) and a checkpoint's fields resolved once into one `ViTConfig` (`resolve_config`), built, and the
checkpoint assigned (`build_from_checkpoint`)."""

from __future__ import annotations

from vit_keras.configs import DEFAULT_IMAGE_SIZE, ViTConfig, config_fields, stored_table
from vit_keras.models.build import build_vit, check_normalization
from vit_keras.weights import hf_family_rows, loading, timm_eva
from vit_keras.weights.infer import infer_config_fields

OPEN_FIELDS = ("activation", "layer_norm_epsilon", "pos_grid", "pos_interpolation")
# Where the fields a partial config leaves out come from: the checkpoint, which states the architecture
# (`from_pretrained`, `vit-keras convert`), or the dataclass defaults (`ViT()`, whose caller states the architecture:
# only `OPEN_FIELDS` and the representation layer follow the checkpoint).
ARCHITECTURE_SOURCES = ("checkpoint", "defaults")


def resolve_config(info, overrides: dict, *, architecture_from: str = "checkpoint", include_top: bool = True,
                   classes=None, interpolation=None, source_grid=None, headless_representation: bool = True,
                   any_image_size: bool | None = None) -> ViTConfig:
    """The config of the model a checkpoint and a caller's partial config describe, made once: one set of rules for
    `ViT()`, `from_pretrained` and `vit-keras convert`.

    `info` is a `vit_keras.weights.CheckpointInfo` (None: no checkpoint) whose `architecture` holds the fields the
    source determines; `overrides` (the partial config) are `ViTConfig` fields the caller chose, and win; the
    fields neither gives come from `architecture_from` (`ARCHITECTURE_SOURCES`). Then:

    - `activation`, `layer_norm_epsilon` (`OPEN_FIELDS`) left out or None follow the checkpoint.
    - `image_size` left out is the checkpoint's stored size (224 when it does not say); `None` is any size, with
      `pos_grid` the checkpoint's stored grid and `pos_interpolation` the in-graph form of `interpolation`. A
      checkpoint without a position table to resample (`position_embedding="none"`: RoPE only, e.g. DINOv3) gives
      a model of any size whose sides the patches divide when `image_size` is left out, as transformers runs it.
    - `any_image_size=True`: a model of any image size (`image_size=None`); an `image_size` in `overrides` then
      only says the grid the position embeddings are resampled to once and stored at (`pos_grid`). None: any size
      for a checkpoint without a position table (above), else as `image_size` says; False: never by default.
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
    if architecture_from not in ARCHITECTURE_SOURCES:
        raise ValueError(f"`architecture_from` must be one of {ARCHITECTURE_SOURCES}, got {architecture_from!r}.")
    overrides = {k: v for k, v in overrides.items() if not (k in OPEN_FIELDS and v is None)}
    unknown = sorted(set(overrides) - set(config_fields()))
    if unknown:
        raise ValueError(f"Unknown ViTConfig fields {unknown}; the fields are {list(config_fields())}.")
    interpolation = interpolation or (info.default_interpolation if info is not None else "linear")
    fields = {} if info is None else _checkpoint_fields(info, overrides, source_grid, architecture_from)
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
    if info is not None:
        # How a model of any size keeps the checkpoint's table: at the grid it is stored at, resampled in the graph
        # as loading resamples it.
        checkpoint_grid = source_grid or info.source_grid
        checkpoint_mode = loading.grid_interpolation(info, interpolation)
    table = stored_table(fields)  # the partial config's position table, before the config is made
    # A table that is part of the architecture (bilinear_crop) stays at its stored grid and keeps its own resampling.
    architectural = table.architectural
    if any_image_size is None:
        any_image_size = (info is not None and architecture_from == "checkpoint" and "image_size" not in overrides
                          and table.any_grid)
    if any_image_size:
        if fields["image_size"] is not None and "image_size" in overrides:  # the grid it is stored at
            overrides = {**overrides, "pos_grid": table.grid}
            fields["pos_grid"] = table.grid
        fields["image_size"] = None
    if fields["image_size"] is None and info is not None:
        if "pos_interpolation" not in overrides and not architectural:
            fields["pos_interpolation"] = checkpoint_mode
        if "pos_grid" not in overrides and checkpoint_grid is not None:
            # Kept at the checkpoint's own grid: every call resamples from the stored table, as timm's
            # dynamic_img_size and transformers' interpolate_pos_encoding do.
            fields["pos_grid"] = tuple(checkpoint_grid)
    elif fields["image_size"] is None and "pos_interpolation" not in overrides and not architectural:
        fields["pos_interpolation"] = interpolation
    if fields["image_size"] is not None and not architectural:
        fields["pos_grid"] = None
    return ViTConfig.from_dict(fields)


def any_grid_families() -> list[str]:
    """The checkpoint families that load as models of any image size by default (`resolve_config`: no table of
    absolute positions, RoPE only), read off the readers' own rows: the transformers model types and timm `eva.py`
    families whose architecture has `position_embedding="none"` (a family's `_ape` variants keep a table).

    Example:
        >>> "transformers dinov3_vit" in any_grid_families(), "transformers dinov2" in any_grid_families()
        (True, False)
    """
    rows = [f"transformers {model_type}" for model_type, family in hf_family_rows.FAMILIES.items()
            if family.fixed.get("position_embedding") == "none"]
    return rows + [f"timm {family.name}" for family in timm_eva.FAMILIES
                   if not {**timm_eva.EVA_DEFAULTS, **family.args}["use_abs_pos_emb"]]


def _checkpoint_fields(info, overrides: dict, source_grid, architecture_from: str) -> dict:
    """The fields a checkpoint determines: its config's, or read off its arrays (a Google `.npz`, whose stored grid
    `source_grid` may state; a bare timm state dict, which needs `num_heads`). A caller that states the architecture
    takes only the `OPEN_FIELDS` of its config."""
    fields = dict(info.architecture or {})
    if architecture_from == "defaults":
        return {k: v for k, v in fields.items() if k in OPEN_FIELDS}
    if info.reader is not None and (not fields or (source_grid is not None and info.format == "google_npz")):
        num_heads = overrides.get("num_heads")
        if info.format == "timm" and num_heads is None:
            raise ValueError(f"{info.path!r} is a bare timm state dict, which does not say its number of heads; "
                             "pass num_heads, or the directory timm's save_for_hf writes (config.json + "
                             "model.safetensors).")
        fields = infer_config_fields(info.read(num_heads), source_grid=source_grid)
    return fields


def check_channels(info, channels: int) -> None:
    """Refuse pretrained weights (`info`, None: none) for images that are not RGB."""
    if info is not None and channels != 3:
        raise ValueError(
            f"Pretrained weights expect RGB images (3 channels), got {channels}; pass input_shape=(H, W, 3) "
            "or weights=None."
        )


def build_from_checkpoint(info, overrides: dict, *, architecture_from: str = "checkpoint", interpolation=None,
                          source_grid=None, include_top=True, pooling=None, classes=None,
                          classifier_activation="softmax", include_preprocessing=True, input_tensor=None, channels=3,
                          name=None, input_size=None, dtype=None, head_tokens_only=False,
                          headless_representation=True, flexible=False, any_image_size=None):
    """The factory behind `ViT()`, `from_pretrained` and `vit-keras convert`: resolve the partial config `overrides`
    once (`resolve_config`: the checkpoint's fields, the caller's winning, the rest from `architecture_from`), build
    it (`build_vit`) and assign the checkpoint's parameters (`vit_keras.weights.load_checkpoint`).

    `info` is what `vit_keras.weights.describe` returns (None: random weights); `classes=None` is the checkpoint's;
    `include_top=None` is the checkpoint's head where it has one, else none: a checkpoint without a classification
    head loads as its backbone, as timm and transformers load it, and `include_top=True` on it (without `classes`
    for a fresh head) is refused; `headless_representation`, `any_image_size`: see `resolve_config`; `flexible`: a
    NaFlex model (see `ViT`), which takes any image size.

    Example:
        >>> model = build_from_checkpoint(None, {"patch_size": 8, "hidden_size": 48, "num_heads": 3,
        ...                                      "num_layers": 1, "image_size": 32}, classes=10)
        >>> model.output_shape
        (None, 10)
    """
    check_channels(info, channels)
    if include_top is None:  # the checkpoint's head, or its backbone when it has none
        include_top = classes is not None or info is None or info.classes is not None
    if include_top and classes is None:
        if info is None or info.classes is None:
            where = "the checkpoint" if info is None else repr(info.path)
            raise ValueError(f"{where} has no classification head, so include_top=True has no classifier to load; "
                             "leave include_top out (or pass include_top=False) for its backbone, or pass classes=N "
                             "for a fresh head.")
        classes = info.classes
    interpolation = interpolation or (info.default_interpolation if info is not None else "linear")
    config = resolve_config(info, overrides, architecture_from=architecture_from, include_top=include_top,
                            classes=classes, interpolation=interpolation, source_grid=source_grid,
                            headless_representation=headless_representation,
                            any_image_size=True if flexible else any_image_size)
    normalization = None if info is None else check_normalization(info.normalization, source=info.path)
    model = build_vit(
        config, include_top=include_top, pooling=pooling, classes=classes if classes is not None else 1000,
        classifier_activation=classifier_activation, include_preprocessing=include_preprocessing,
        normalization=normalization, input_tensor=input_tensor, channels=channels, name=name, input_size=input_size,
        dtype=dtype, head_tokens_only=head_tokens_only, flexible=flexible,
    )
    if info is not None:
        loading.load_checkpoint(model, config, info, interpolation=interpolation, source_grid=source_grid)
    return model
