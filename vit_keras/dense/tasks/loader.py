"""`from_pretrained` for transformers' task checkpoints: EoMT (`EomtForUniversalSegmentation`), Depth Anything
(`DepthAnythingForDepthEstimation`) and ViTPose (`VitPoseForPoseEstimation`), from a `save_pretrained` directory or
a hub id. The config.json gives the architecture (`vit_keras.dense.tasks.families` reads the backbone's, this
module the head's), the model is built (`vit_keras.dense.tasks.builders`), and the weights are read with the model
type's rule table and assigned all at once.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re

import numpy as np

from vit_keras.configs import ViTConfig, check_hw, config_fields
from vit_keras.dense.tasks import builders
from vit_keras.dense.tasks.families import TASK_FAMILIES, read_backbone
from vit_keras.weights import hf, hub, json_config, rules
from vit_keras.weights.assign import assign_params
from vit_keras.weights.schema import BLOCK

logger = logging.getLogger("vit_keras.weights")

# The normalisation of all three models' published image processors (EoMT's and ViTPose's class defaults, and the
# Depth Anything checkpoints' preprocessor_config.json), for a directory without a preprocessor_config.json.
IMAGENET_NORMALIZATION = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
DEPTH_TYPES = ("relative", "metric")


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What a task checkpoint's config says to build: the builder, the backbone's config, the head, the position
    table's stored grid (None: the model's own) and the tensors to read (the file's, or a rewritten copy)."""

    build: object
    config: ViTConfig
    head: object
    tensors: object
    stored_grid: tuple | None = None


def _fields_config(fields: dict, **overrides) -> ViTConfig:
    return ViTConfig.from_dict({**{k: v for k, v in fields.items() if k in config_fields()}, **overrides})


def _eomt(config: dict, file: str, tensors, fields: dict, image_size, dataset_index) -> _Plan:
    if image_size is not None and tuple(image_size) != tuple(fields["image_size"]):
        raise ValueError(f"image_size={tuple(image_size)}: EoMT runs at its configured image_size "
                         f"{tuple(fields['image_size'])} ({file!r}), as transformers does; resize the images to it.")
    num_blocks = json_config.require(config, "num_blocks", int, file, default=4, positive=True)
    probs = tensors.get("attn_mask_probs")
    probs = [1.0] * num_blocks if probs is None else [float(p) for p in probs.reshape(-1)]
    if len(probs) != num_blocks:
        raise ValueError(f"{file!r}: attn_mask_probs has {len(probs)} entries but num_blocks is {num_blocks}.")
    if any(0 < p < 1 for p in probs):
        raise ValueError(f"attn_mask_probs {probs} in {os.path.dirname(file)!r}: a probability between 0 and 1 makes "
                         "transformers drop the masks of random queries at every call; vit_keras runs deterministic "
                         "models (each entry 0: no masked attention, or 1: masked). Use a checkpoint whose training "
                         "finished its mask annealing.")
    head = builders.SegmentationHead(
        num_queries=json_config.require(config, "num_queries", int, file, default=200, positive=True),
        num_blocks=num_blocks, masked_blocks=tuple(p > 0 for p in probs),
        num_labels=len(json_config.require(config, "id2label", dict, file)),
        num_upscale_blocks=json_config.require(config, "num_upscale_blocks", int, file, default=2, positive=True),
        activation=fields["activation"])
    return _Plan(builders.eomt_model, _fields_config(fields), head, tensors)


def _stages(backbone: dict, file: str, num_layers: int) -> tuple[str, ...]:
    names = ["stem", *[f"stage{k}" for k in range(1, num_layers + 1)]]
    indices = json_config.require(backbone, "out_indices", list, file, default=None)
    if indices is None:
        features = json_config.require(backbone, "out_features", list, file, default=[names[-1]])
        if any(feature not in names for feature in features):
            raise ValueError(f"{file!r}: out_features {features} are not among the backbone's stages {names}.")
        return tuple(features)
    if any(not isinstance(i, int) or isinstance(i, bool) or not -len(names) <= i < len(names) for i in indices):
        raise ValueError(f"{file!r}: out_indices {indices} must be stage indices 0..{num_layers} (0: the "
                         "embeddings).")
    return tuple(names[i] for i in indices)


def _depth_anything(config: dict, file: str, tensors, fields: dict, image_size, dataset_index) -> _Plan:
    backbone = config["backbone_config"]
    stages = _stages(backbone, file, fields["num_layers"])
    sizes = json_config.require(config, "neck_hidden_sizes", list, file)
    factors = json_config.require(config, "reassemble_factors", list, file)
    if len(sizes) != len(stages) or len(factors) != len(stages):
        raise ValueError(f"{file!r}: the DPT neck reads {len(stages)} stages ({list(stages)}) but has "
                         f"{len(sizes)} neck_hidden_sizes and {len(factors)} reassemble_factors; they must agree.")
    kind = json_config.require(config, "depth_estimation_type", str, file, default="relative")
    if kind not in DEPTH_TYPES:
        raise ValueError(f"{file!r}: depth_estimation_type {kind!r} is not one of {DEPTH_TYPES}.")
    head_index = json_config.require(config, "head_in_index", int, file, default=-1)
    if head_index != -1:
        raise ValueError(f"{file!r}: head_in_index {head_index}: the depth head reads the last fused map (-1), as "
                         "every published Depth Anything does.")
    head = builders.DepthHeadConfig(
        stages=stages, apply_layernorm=json_config.require(backbone, "apply_layernorm", bool, file, default=True),
        neck_hidden_sizes=tuple(sizes), reassemble_factors=tuple(factors),
        fusion_hidden_size=json_config.require(config, "fusion_hidden_size", int, file, positive=True),
        head_hidden_size=json_config.require(config, "head_hidden_size", int, file, positive=True),
        depth_estimation_type=kind,
        max_depth=float(json_config.require(config, "max_depth", (int, float), file, default=1)))
    stored_grid = tuple(side // fields["patch_size"] for side in fields["image_size"])
    # Without an image size: any size, the table kept at its stored grid and resized at each call, as transformers.
    sizes = dict(image_size=tuple(image_size)) if image_size is not None else \
        dict(image_size=None, pos_grid=stored_grid, pos_interpolation="bicubic")
    return _Plan(builders.depth_anything_model, _fields_config(fields, **sizes), head, tensors, stored_grid)


_EXPERT = re.compile(r"^(?P<block>.*\.mlp)\.experts\.(?P<expert>\d+)\.(?P<param>weight|bias)$")


def _with_expert(tensors, num_experts: int, dataset_index: int, file: str) -> dict:
    """ViTPose++'s mixture-of-experts MLPs for one dataset: each block's `fc2` (the shared output features) joined
    by that dataset's expert (the last `part_features`), as the plain MLP they compute together for its images."""
    out, experts = {}, {}
    for key, value in tensors.items():
        found = _EXPERT.match(key)
        if found:
            experts[(found["block"], int(found["expert"]), found["param"])] = value
        else:
            out[key] = value
    for (block, expert, param), value in experts.items():
        if expert >= num_experts:
            raise ValueError(f"{file!r} says num_experts={num_experts}, but the weights hold {block}.experts.{expert}.")
        if expert == dataset_index:
            shared = out.get(f"{block}.fc2.{param}")
            if shared is None:
                raise ValueError(f"The weights hold {block}.experts.{expert}.{param} but not {block}.fc2.{param}; "
                                 "re-save the model's complete state dict.")
            out[f"{block}.fc2.{param}"] = np.concatenate([shared, value], axis=0)
    return out


def _vitpose(config: dict, file: str, tensors, fields: dict, image_size, dataset_index) -> _Plan:
    if image_size is not None and tuple(image_size) != tuple(fields["image_size"]):
        raise ValueError(f"image_size={tuple(image_size)}: ViTPose runs at its configured image_size "
                         f"{tuple(fields['image_size'])} ({file!r}); crop and resize each person box to it.")
    backbone = config["backbone_config"]
    num_experts = json_config.require(backbone, "num_experts", int, file, default=1, positive=True)
    if num_experts > 1:
        if isinstance(dataset_index, bool) or not isinstance(dataset_index, int) or \
                not 0 <= dataset_index < num_experts:
            raise ValueError(f"dataset_index={dataset_index!r}: {os.path.dirname(file)!r} is a ViTPose++ model with "
                             f"{num_experts} experts, one per training dataset; pass dataset_index=0..."
                             f"{num_experts - 1} (the dataset whose keypoints the model predicts).")
        tensors = _with_expert(tensors, num_experts, dataset_index, file)
    elif dataset_index not in (None, 0):
        raise ValueError(f"dataset_index={dataset_index!r}: {os.path.dirname(file)!r} is a ViTPose model with one "
                         "expert (not ViTPose++); drop dataset_index.")
    stage = _stages(backbone, file, fields["num_layers"])[-1]
    simple = json_config.require(config, "use_simple_decoder", bool, file, default=True)
    head = builders.PoseHead(
        num_keypoints=len(json_config.require(config, "id2label", dict, file)),
        decoder="simple" if simple else "classic",
        scale_factor=json_config.require(config, "scale_factor", int, file, default=4, positive=True), stage=stage)
    return _Plan(builders.vitpose_model, _fields_config(fields), head, tensors)


_TASKS = {"eomt": _eomt, "depth_anything": _depth_anything, "vitpose": _vitpose}


def _split_unread_blocks(params, num_layers: int, model) -> tuple[dict, dict]:
    """(the params of the model, those of the blocks it does not compute): a backbone read at an earlier stage than
    its last (transformers keeps and runs them, their output unused)."""
    built = {layer.name for layer in model.layers}
    unused = [i for i in range(num_layers) if f"Transformer_encoderblock_{i}" not in built]
    if not unused:
        return params, {}
    pattern = re.compile("^(" + "|".join(re.escape(BLOCK.format(i=i)) + "/" for i in unused) + ")")
    kept = {key: value for key, value in params.items() if not pattern.match(key)}
    logger.info("Blocks %s come after the last stage read; they are not part of the model.", unused)
    unread = {key: value for key, value in params.items() if pattern.match(key)}
    return rules.CanonicalParams(kept, getattr(params, "origins", {}), getattr(params, "source", "")), unread


def from_pretrained(source, *, include_preprocessing: bool = True, image_size=None, dataset_index: int | None = None,
                    name: str | None = None, revision: str | None = None, token=None, cache_dir: str | None = None,
                    sha256: str | None = None):
    """The transformers task model in `source` (a `save_pretrained` directory, or a hub id `"hf-hub:ORG/NAME"`) as
    a Keras model, its weights loaded exactly; its output is a dict keyed by transformers' output names, spatial
    outputs channels-last: EoMT `class_queries_logits` (B, Q, C+1) and `masks_queries_logits` (B, h, w, Q);
    Depth Anything `predicted_depth` (B, H, W); ViTPose `heatmaps` (B, h, w, K).

    `include_preprocessing=True`: the model takes RGB in [0, 255] and normalises it as the checkpoint's image
    processor does (its `preprocessor_config.json`, else ImageNet's mean and std as the published ones);
    `False`: images already normalised. Depth Anything takes images of any size whose sides are multiples of the
    patch size, its position embeddings resized bicubic at each call as transformers does; `image_size` (int or
    (h, w)) fixes its input size instead (the embeddings resized once, at load). EoMT and ViTPose run at their
    configured size. `dataset_index`: for a ViTPose++ checkpoint (one MLP expert per training dataset), the dataset
    whose expert the model computes.

    Example:
        >>> model = from_pretrained("tests/fixtures/tasks/vitpose_simple/checkpoint")  # RGB in [0, 255]
        >>> {name: tuple(value.shape) for name, value in model(np.zeros((1, 32, 32, 3), "float32")).items()}
        {'heatmaps': (1, 16, 16, 5)}
    """
    path = os.fspath(hub.resolve(source, revision=revision, token=token, cache_dir=cache_dir, sha256=sha256))
    if not hf.is_hf_dir(path):
        raise ValueError(f"{path!r} is not a transformers save_pretrained directory (config.json + "
                         "model.safetensors); vit_keras.dense.from_pretrained reads EoMT, Depth Anything and ViTPose "
                         "task checkpoints.")
    file = os.path.join(path, hf.CONFIG_NAME)
    config = json_config.load(file)
    model_type = config.get("model_type")
    family = TASK_FAMILIES.get(model_type)
    if family is None:
        hint = (" It is a backbone or classifier vit_keras reads: use vit_keras.from_pretrained."
                if model_type in hf.MODEL_TYPES else "")
        raise ValueError(f"{file!r} holds a {model_type!r} model, not a task model vit_keras.dense.from_pretrained "
                         f"reads ({', '.join(f'{f.model_type}: {f.classes}' for f in TASK_FAMILIES.values())})."
                         + hint)
    architectures = config.get("architectures") or [family.classes]
    if family.classes not in architectures:
        raise ValueError(f"{file!r} holds {architectures}, a {model_type} model of another task; "
                         f"vit_keras.dense.from_pretrained reads {family.classes}.")
    if image_size is not None:
        image_size = check_hw("image_size", image_size)
    if dataset_index is not None and model_type != "vitpose":
        raise ValueError(f"dataset_index={dataset_index!r} chooses a ViTPose++ expert; {file!r} holds a "
                         f"{family.classes}, which has none: drop dataset_index.")
    fields, switches = read_backbone(family, config, file)
    tensors = hf.read_tensors(path)
    source_name = rules.source_name(tensors, None)
    plan = _TASKS[model_type](config, file, tensors, fields, image_size, dataset_index)
    params = rules.apply_table(family.table, plan.tensors, num_heads=fields["num_heads"], source=source_name,
                               switches=switches, fields=fields)
    normalization = (hf.preprocessor_normalization(path) or IMAGENET_NORMALIZATION) if include_preprocessing \
        else None
    model = plan.build(plan.config, plan.head, include_preprocessing=include_preprocessing,
                       normalization=normalization, **({"name": name} if name else {}))
    params, unread = _split_unread_blocks(params, plan.config.num_layers, model)
    assign_params(model, params, source=path, source_grid=plan.stored_grid, interpolation="bicubic")
    # What `save_pretrained` writes back: the config, and the file's tensors the model does not hold (buffers such
    # as EoMT's attn_mask_probs, unused parameters such as DINOv2's mask token, empty ones such as the register
    # tokens of a model without registers, the blocks it does not compute), as they were.
    model.transformers_config = config
    model.transformers_extra_tensors = {
        **{key: tensors[key] for key in tensors
           if tensors[key].size == 0 or family.table.is_ignored(family.table.strip(key)[1])},
        **rules.invert_table(family.table, unread, num_heads=fields["num_heads"])}
    return model
