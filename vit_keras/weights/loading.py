"""What a checkpoint says about the model it fits (`describe` → `CheckpointInfo`) and its parameters loaded into a
built model (`load_checkpoint`, `load_into`, `load_weights`): Google `.npz`, timm `.safetensors`, Hugging Face
directories, Keras `.weights.h5`, URLs and registered names, read without pickle, mapped by name, all or nothing.

Example:
    >>> describe("model.weights.h5").format
    'keras'
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import warnings
from collections.abc import Callable

from vit_keras.configs import CLASSIFIER_POOLS, config_fields, resnet_stride
from vit_keras.vision_transformer import VisionTransformer, config_of
from vit_keras.weights import download, google, hf, hub, json_config, registry, timm, timm_eva
from vit_keras.weights.assign import assign_params
from vit_keras.weights.infer import infer_config_fields
from vit_keras.weights.keras_h5 import load_keras_weights
from vit_keras.weights.registry import REGISTRY, WeightsEntry
from vit_keras.weights.resample import check_interpolation, check_source_grid, infer_grid
from vit_keras.weights.safetensors_io import read_safetensors, refuse_pickle

logger = logging.getLogger("vit_keras.weights")

KERAS_WEIGHTS_SUFFIX = ".weights.h5"
GOOGLE_LAYER_NORM_EPSILON = 1e-6
TIMM_LAYER_NORM_EPSILON = 1e-6


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    """What a weights source says about the model it fits; `None` fields leave the choice to the caller.

    `architecture` holds the `ViTConfig` fields the source determines (from its config file or its arrays);
    `read(num_heads)` returns the canonical parameter dict (vit_jax raw names), read lazily. `normalization` is the
    (mean, std) the checkpoint was trained with; `antialias` says that the source's own library resamples position
    embeddings with torch's antialiased bicubic (timm); `native_aspect`: a NaFlex checkpoint (SigLIP 2), which has
    no fixed image size.

    Example:
        >>> CheckpointInfo(path="m.weights.h5", format="keras").format
        'keras'
    """

    path: str
    format: str
    activation: str | None = None
    layer_norm_epsilon: float | None = None
    classes: int | None = None
    representation_size: int | None = None
    source_grid: tuple[int, int] | None = None
    reader: Callable | None = dataclasses.field(default=None, repr=False, compare=False)
    architecture: dict | None = dataclasses.field(default=None, compare=False)
    normalization: tuple | None = None
    antialias: bool = False
    default_interpolation: str = "linear"
    native_aspect: bool = False

    @property
    def gelu_approximate(self) -> bool | None:
        return {"gelu_tanh": True, "gelu": False}.get(self.activation)

    def read(self, num_heads: int | None = None, architecture: dict | None = None) -> dict:
        """The canonical parameter dict. `architecture` (the model's `ViTConfig` fields) lets a reader without a
        config of its own (a bare timm state dict) check each tensor's shape against the model it is read for."""
        if self.reader is None:
            raise ValueError(f"{self.path!r} ({self.format}) has no parameter dict; it is loaded by Keras.")
        if architecture is not None and getattr(self.reader, "checks_shapes", False):
            return self.reader(num_heads, architecture)
        return self.reader(num_heads)


def _shape_or_none(params, key, axis=-1):
    value = params.get(key)
    return None if value is None else int(value.shape[axis])


def _google_info(path) -> CheckpointInfo:
    params = google.read_npz(path)
    fields = infer_config_fields(params)
    fields.update(activation="gelu_tanh", layer_norm_epsilon=GOOGLE_LAYER_NORM_EPSILON)
    size, stride = fields["image_size"], fields["patch_size"] * resnet_stride(fields["resnet"])
    return CheckpointInfo(
        path=path, format="google_npz", activation="gelu_tanh", layer_norm_epsilon=GOOGLE_LAYER_NORM_EPSILON,
        classes=_shape_or_none(params, "head/bias"), representation_size=_shape_or_none(params, "pre_logits/bias"),
        reader=lambda num_heads: params, architecture=fields,
        # The grid read off the table where it is square (a `source_grid` passed when loading says another).
        source_grid=None if size is None else (size[0] // stride, size[1] // stride),
    )


def _stored_grid(fields: dict, config_path: str) -> tuple[int, int]:
    """The patch grid a checkpoint's position embeddings were stored at: its config's `pos_grid` (a table that is
    part of the architecture, RADIO's), or its image size over its patch size."""
    if fields.get("pos_grid") is not None:
        return tuple(fields["pos_grid"])
    size, patch = fields["image_size"], fields["patch_size"]
    grid = (size[0] // patch, size[1] // patch)
    if 0 in grid:
        raise ValueError(f"{config_path!r}: image_size {list(size)} is smaller than patch_size {patch}.")
    return grid


# A model whose input conditioner normalises inside (RADIO) takes [0, 1] images: preprocessing only divides by 255.
_RADIO_PREPROCESSING = ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))


def _hf_info(directory) -> CheckpointInfo:
    config = hf.read_config(directory)
    tensors = hf.read_tensors(directory)  # first: a pickle-only directory is refused as such
    return hf_checkpoint_info(config, tensors, path=directory,
                              normalization=hf.preprocessor_normalization(directory))


def hf_checkpoint_info(config: dict, tensors: dict, *, path: str, normalization: tuple | None = None) -> CheckpointInfo:
    """What a transformers checkpoint already in memory says: its config.json as a dict and its tensors (a
    `save_pretrained` directory's, or an image-text model's vision tower, which `vit_keras.from_pretrained` then
    builds from this without writing it anywhere). `path` names the checkpoint in messages (config.json is taken to
    sit in it); `normalization` is its image processor's (mean, std) (`hf.normalization_of`). A config vit_keras
    cannot run is refused here, as from a directory (`hf.architecture` checks what it reads).

    Example:
        >>> from vit_keras.weights.hf import read_config, read_tensors
        >>> directory = "tests/fixtures/hf_dir/hf_model"
        >>> info = hf_checkpoint_info(read_config(directory), read_tensors(directory), path=directory)
        >>> info.format, info.classes, info.source_grid
        ('hf', 7, (8, 8))
    """
    fields = hf.architecture(config, path)
    params = hf.canonicalize(tensors, config)
    if "pre_logits/bias" in params:
        fields["representation_size"] = _shape_or_none(params, "pre_logits/bias")
    grid = _stored_grid(fields, os.path.join(path, hf.CONFIG_NAME))
    naflex = config.get("model_type") in hf.NAFLEX_MODEL_TYPES
    return CheckpointInfo(
        path=path, format="hf", activation=fields["activation"],
        layer_norm_epsilon=fields["layer_norm_epsilon"],
        classes=_shape_or_none(params, "head/bias"), representation_size=fields.get("representation_size"),
        source_grid=grid, reader=lambda num_heads: params, architecture=fields,
        default_interpolation="bilinear_antialias" if naflex else "bicubic", native_aspect=naflex,
        # RADIO normalises inside the model (its input conditioner): the preprocessing only scales to [0, 1].
        normalization=_RADIO_PREPROCESSING if fields.get("input_normalization") is not None else normalization,
    )


def _timm_dir_info(directory) -> CheckpointInfo:
    architecture = json_config.load(os.path.join(directory, timm.CONFIG_NAME)).get("architecture")
    naflex = False
    if timm_eva.knows(architecture):  # timm's eva.py models (EVA-02, DINOv3, PE, RoPE-ViT); else its ViTs
        fields, normalization, params = timm_eva.read_directory(directory)
    else:
        fields, normalization = timm.read_config(directory)
        tensors = read_safetensors(hf.weights_file(directory))
        naflex = timm.is_naflex(directory)
        params = timm.canonicalize(tensors, fields["num_heads"], config=fields, naflex=naflex)
    grid = _stored_grid(fields, os.path.join(directory, timm.CONFIG_NAME))
    return CheckpointInfo(
        path=directory, format="timm", activation=fields["activation"],
        layer_norm_epsilon=fields["layer_norm_epsilon"], classes=_shape_or_none(params, "head/bias"),
        representation_size=_shape_or_none(params, "pre_logits/bias"), source_grid=grid,
        reader=lambda num_heads: params, architecture=fields, normalization=normalization,
        antialias=not naflex, default_interpolation="bilinear_antialias" if naflex else "bicubic",
        native_aspect=naflex,
    )


def _directory_info(directory) -> CheckpointInfo:
    """A config.json directory: timm's `save_for_hf` (an `architecture` key) or transformers' (`model_type`)."""
    config_path = os.path.join(directory, hf.CONFIG_NAME)
    config = json_config.load(config_path)
    if "architecture" in config:
        return _timm_dir_info(directory)
    if "model_type" in config:
        return _hf_info(directory)
    raise ValueError(f"{config_path!r} has neither 'architecture' (a timm save_for_hf config) nor 'model_type' (a "
                     "transformers save_pretrained config); re-save the checkpoint with its library.")


def _safetensors_info(path) -> CheckpointInfo:
    sibling = os.path.dirname(os.path.abspath(path))
    if os.path.basename(path) == hf.WEIGHTS_NAME and hf.is_hf_dir(sibling):
        return _directory_info(sibling)
    tensors = read_safetensors(path)
    if not timm.looks_like_timm(tensors):
        raise ValueError(
            f"{path!r} is neither a timm ViT state dict (blocks.*, patch_embed.*) nor next to a Hugging Face "
            "config.json; pass the Hugging Face directory instead of the bare file."
        )
    head = tensors.get("head.weight")

    def reader(num_heads, architecture=None):
        if num_heads is None:
            raise ValueError("timm checkpoints do not store the number of heads; load them into a model.")
        return timm.canonicalize(tensors, num_heads, architecture=architecture)

    reader.checks_shapes = True
    rep = tensors.get("pre_logits.fc.weight")
    return CheckpointInfo(
        path=path, format="timm", activation="gelu", layer_norm_epsilon=TIMM_LAYER_NORM_EPSILON,
        classes=None if head is None else int(head.shape[0]), representation_size=None if rep is None else
        int(rep.shape[0]), reader=reader, antialias=True, source_grid=_square_table_grid(tensors),
    )


def _square_table_grid(tensors: dict) -> tuple[int, int] | None:
    """The square patch grid of a bare timm state dict's `pos_embed`, with its prefix rows (class and register
    tokens: timm's default) or without them (`no_embed_class`); None when neither is square."""
    table = tensors.get("pos_embed")
    if table is None or table.ndim != 3:
        return None
    prefix = sum(int(tensors[name].shape[1]) for name in ("cls_token", "reg_token") if name in tensors)
    for rows in (int(table.shape[1]) - prefix, int(table.shape[1])):
        side = math.isqrt(max(rows, 0))
        if rows > 0 and side * side == rows:
            return (side, side)
    return None


def _downloaded_info(path, origin, cache_dir) -> CheckpointInfo:
    try:
        return _local_info(path)
    except ValueError:
        # A verified download that cannot be read (pickled objects, a corrupt HDF5 or npz the server itself
        # holds) must not stay in the cache, nor its trust-on-first-use pin, which would refuse a repaired file.
        download.forget(origin, cache_dir=cache_dir, filename=os.path.basename(path))
        raise


def _check_keras_weights_file(path) -> None:
    """Open a `.weights.h5` and walk its metadata, so a corrupt or truncated file is caught before the model is
    built (and, when it was downloaded, removed from the cache); whether it fits the model is load_into's job."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            f.visit(lambda name: None)
    except OSError as error:
        raise ValueError(f"{path!r} is not a readable Keras weights file ({error}); it may be truncated or "
                         "corrupt. Save it again with model.save_weights, or download it again.") from error


def _local_info(path) -> CheckpointInfo:
    lower = path.lower()
    refuse_pickle(path)
    if lower.endswith(KERAS_WEIGHTS_SUFFIX):
        if os.path.isfile(path):
            _check_keras_weights_file(path)
        return CheckpointInfo(path=path, format="keras")
    if lower.endswith(".keras"):
        raise ValueError(f"{path!r} is a whole saved model: open it with keras.saving.load_model({path!r}).")
    if os.path.isdir(path):
        if hf.is_hf_dir(path):
            return _directory_info(path)
        raise ValueError(f"{path!r} is a directory without config.json; pass a Hugging Face save_pretrained "
                         "directory or a checkpoint file.")
    if not os.path.isfile(path):
        raise ValueError(f"Weights file {path!r} does not exist; check the path.")
    if lower.endswith(".npz"):
        return _google_info(path)
    if lower.endswith(".safetensors"):
        return _safetensors_info(path)
    raise ValueError(
        f"Cannot tell the format of {path!r}: use a Google .npz, a timm .safetensors, a Hugging Face directory "
        f"or a Keras '{KERAS_WEIGHTS_SUFFIX}' file."
    )


def describe(weights, *, architecture: dict | None = None, image_size=None, sha256: str | None = None,
             cache_dir: str | None = None) -> CheckpointInfo | None:
    """Resolve the `weights=` argument of the model constructors, before the model is built.

    `weights` is None, a registered name (`"imagenet21k"`, `"imagenet"`, ... for the variant that
    `architecture` matches; `"B/16:imagenet21k"` anywhere), a path (Google `.npz`, timm `.safetensors`, a Hugging
    Face directory, a Keras `.weights.h5`) or an http(s)/file URL of one.

    Example:
        >>> describe("model.weights.h5").format
        'keras'
    """
    if weights is None or isinstance(weights, CheckpointInfo):
        return weights
    if not isinstance(weights, str | os.PathLike):
        raise ValueError(f"Unsupported `weights` value {weights!r}: pass None, a registered name (see "
                         "vit_keras.list_weights()), a checkpoint path or a URL.")
    source = hub.resolve(os.fspath(weights), cache_dir=cache_dir, sha256=sha256)
    if download.is_url(source):
        refuse_pickle(source)
        path = download.fetch(source, sha256=sha256, cache_dir=cache_dir)
        return _downloaded_info(path, source, cache_dir)
    registered = ":" in source and source in REGISTRY
    if not registered and (os.sep in source or os.path.exists(source) or "." in os.path.basename(source)):
        return _local_info(source)
    variant = registry.variant_of(architecture) if architecture else None
    entry = registry.find(variant, source, image_size=image_size)
    if variant is not None and entry.variant != variant:
        raise ValueError(f"{entry.key!r} is a ViT-{entry.variant} checkpoint but this model is ViT-{variant}.")
    path = download.fetch(entry.url, sha256=sha256 or entry.sha256, cache_dir=cache_dir, filename=entry.filename)
    return _downloaded_info(path, entry.url, cache_dir)


def architecture_of(model) -> dict:
    """The architecture arguments of a built vit_keras model: every `ViTConfig` field but `name`, and `classifier`
    (the older name of `global_pool`) for code written against it.

    Read from the `ViTConfig` the model carries (`model_config`).

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> architecture_of(model)["hidden_size"]
        48
    """
    config = model_config(model)
    classifier = {pool: name for name, pool in CLASSIFIER_POOLS.items()}[config.global_pool]
    return {**{field: getattr(config, field) for field in config_fields()}, "classifier": classifier}


def model_config(model):
    """The `ViTConfig` a vit_keras model carries (`VisionTransformer.vit_config`, which a file saved by 0.1.0 also
    gives); a model that carries none is refused.

    Example:
        >>> import vit_keras
        >>> model_config(vit_keras.ViTTi16(image_size=32)).hidden_size
        192
    """
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"{getattr(model, 'name', model)!r} is not a vit_keras model (it carries no ViTConfig); "
                         "build it with vit_keras.ViT or vit_keras.from_pretrained.")
    return config_of(model)


def _check_numerics(config, info: CheckpointInfo) -> None:
    mismatches = []
    if info.activation is not None and config.activation != info.activation:
        flavours = {"gelu_tanh": True, "gelu": False}
        if config.activation in flavours and info.activation in flavours:
            mismatches.append(f"gelu_approximate={flavours[config.activation]} but the checkpoint was trained with "
                              f"{flavours[info.activation]}")
        else:
            mismatches.append(f"activation={config.activation!r} but the checkpoint was trained with "
                              f"{info.activation!r}")
    eps = config.layer_norm_epsilon
    if info.layer_norm_epsilon is not None and abs(eps - info.layer_norm_epsilon) > 1e-15:
        mismatches.append(f"layer_norm_epsilon={eps} but the checkpoint used {info.layer_norm_epsilon}")
    if mismatches:
        message = (f"{info.path}: the model's {'; '.join(mismatches)}. Outputs will differ from the reference; "
                   "rebuild with gelu_approximate=None, layer_norm_epsilon=None to follow the checkpoint, or use "
                   "vit_keras.from_pretrained.")
        logger.warning(message)
        warnings.warn(message, UserWarning, stacklevel=4)


def stored_grid(info: CheckpointInfo, *, num_heads: int, num_embedded_prefix_tokens: int, source_grid=None):
    """The patch grid a checkpoint's position embeddings are stored at (None when it cannot be told before loading,
    e.g. a Keras weights file): `source_grid` if given, the grid its config states, or a square grid read off the
    table.

    Example:
        >>> stored_grid(describe("tests/fixtures/vitjax_token_raw/checkpoint.npz"), num_heads=3,
        ...             num_embedded_prefix_tokens=1)
        (8, 8)
    """
    source_grid = check_source_grid(source_grid) or info.source_grid
    if source_grid is not None:
        return tuple(source_grid)
    if info.reader is None:
        return None
    table = info.read(num_heads).get(google.POS_EMBEDDING_KEY)
    if table is None or table.ndim != 3:
        return None
    return infer_grid(int(table.shape[1]) - num_embedded_prefix_tokens)


def grid_interpolation(info: CheckpointInfo | None, interpolation: str) -> str:
    """The in-graph mode (`vit_keras.configs.POS_INTERPOLATIONS`) of the load-time resampling `load_into` does with
    `interpolation` for `info`: timm's bicubic is antialiased.

    Example:
        >>> grid_interpolation(None, "bicubic")
        'bicubic'
    """
    check_interpolation(interpolation)
    if interpolation == "bicubic" and info is not None and info.antialias:
        return "bicubic_antialias"
    return interpolation


def load_into(model, info: CheckpointInfo, *, interpolation: str = "linear", source_grid=None) -> None:
    """Load the weights `info` describes into the already-built `model`, all of them or none.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> model.save_weights("model.weights.h5")
        >>> load_into(model, describe("model.weights.h5"))
    """
    check_interpolation(interpolation)
    source_grid = check_source_grid(source_grid)
    if info.format == "keras":
        if source_grid is not None:
            raise ValueError(
                f"`source_grid` describes a checkpoint's stored position-embedding grid for resampling, but "
                f"{info.path!r} is a Keras weights file, loaded as saved; drop source_grid or build the model at "
                "the size that saved it."
            )
        load_keras_weights(model, info.path)
        return
    load_checkpoint(model, model_config(model), info, interpolation=interpolation, source_grid=source_grid)


def load_checkpoint(model, config, info: CheckpointInfo, *, interpolation: str = "linear", source_grid=None) -> None:
    """Assign a checkpoint's parameters (not a Keras weights file, which `load_into` loads as saved) to a model
    built from `config`, which the caller holds (the factory, which has just made it): the checkpoint's numerics
    are checked against `config` and its parameters read for it.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=96, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=7)
        >>> load_checkpoint(model, model.vit_config, describe("tests/fixtures/vitjax_token_raw/checkpoint.npz"))
    """
    _check_numerics(config, info)
    params = info.read(config.num_heads, architecture={field: getattr(config, field) for field in config_fields()})
    assign_params(model, params, source=info.path, source_grid=source_grid or info.source_grid,
                  interpolation=interpolation, antialias=info.antialias and interpolation == "bicubic")


def load_weights(model, source, *, interpolation: str = "linear", source_grid=None, sha256: str | None = None,
                 cache_dir: str | None = None):
    """Load any supported checkpoint into an existing vit_keras model and return the model.

    `source`: a registered name (for the model's variant), a Google `.npz`, a timm `.safetensors`, a Hugging Face
    directory, a `.weights.h5`, or an http(s)/file URL. Position embeddings are resampled to the model's grid
    (`interpolation="linear"`: vit_jax; `"bicubic"`: Hugging Face `interpolate_pos_encoding`). `source_grid`
    gives the stored grid when it is not square. `sha256` pins a URL's content.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=96, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=7)
        >>> vit_keras.load_weights(model, "tests/fixtures/vitjax_token_raw/checkpoint.npz")  # 8x8 grid to 12x12
        <VisionTransformer name=vit, built=True>

        With a registered name (`vit_keras.load_weights(vit_keras.ViTB16(image_size=384, weights=None),
        "imagenet21k+imagenet2012")`) the checkpoint is downloaded on first use, then read from the cache.
    """
    # Checked before `describe`, which may download gigabytes.
    check_interpolation(interpolation)
    source_grid = check_source_grid(source_grid)
    image_size = model_config(model).reference_image_size
    info = describe(source, architecture=architecture_of(model), image_size=image_size, sha256=sha256,
                    cache_dir=cache_dir)
    load_into(model, info, interpolation=interpolation, source_grid=source_grid)
    return model


def list_weights(variant: str | None = None) -> list[WeightsEntry]:
    """The registered checkpoints (all, or one variant's), with URL, resolution, classes and published top-1.

    Example:
        >>> [e.name for e in list_weights("B/16")][:2]
        ['imagenet21k', 'imagenet21k+imagenet2012']
    """
    return [entry for entry in REGISTRY.values() if variant is None or entry.variant == variant]


__all__ = ["CheckpointInfo", "architecture_of", "model_config", "describe", "grid_interpolation",
           "hf_checkpoint_info", "list_weights", "stored_grid", "load_checkpoint", "load_into", "load_weights"]
