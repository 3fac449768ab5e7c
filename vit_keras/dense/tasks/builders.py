"""The task models on a vit_keras ViT, built from a checkpoint's config: EoMT universal segmentation, Depth Anything
monocular depth, ViTPose keypoint heatmaps. Each is one Keras functional model on images `(B, H, W, 3)` whose output
is a dict keyed by transformers' output names, spatial outputs channels-last:

- EoMT: `class_queries_logits` (B, Q, C+1) and `masks_queries_logits` (B, h, w, Q);
- Depth Anything: `predicted_depth` (B, H, W);
- ViTPose: `heatmaps` (B, h, w, K).

The backbone is `vit_keras.models.build.build_vit`'s (its layers carry the canonical checkpoint names), the heads are
`vit_keras.dense.tasks.layers`'; all of them sit in the one model, so `vit_keras.weights.assign.assign_params` fills
(or refuses) every variable at once.

Example:
    >>> from vit_keras.configs import ViTConfig
    >>> config = ViTConfig.from_dict(dict(patch_size=8, hidden_size=32, num_heads=2, num_layers=2, mlp_dim=64,
    ...                                   image_size=(32, 32), class_token=False,
    ...                                   global_pool="avg"))
    >>> model = vitpose_model(config, PoseHead(num_keypoints=5), include_preprocessing=False)
    >>> {name: tuple(value.shape) for name, value in model(keras.ops.zeros((1, 32, 32, 3))).items()}
    {'heatmaps': (1, 16, 16, 5)}
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops

from vit_keras.configs import ViTConfig
from vit_keras.dense.tasks.layers import (
    DepthHead,
    DPTNeck,
    EomtMaskHead,
    EomtUpscale,
    PatchPadding,
    QueryAttentionMask,
    QueryTokens,
    VitPoseClassicDecoder,
    VitPoseSimpleDecoder,
)
from vit_keras.features import intermediate_model
from vit_keras.layers.norms import norm_layer
from vit_keras.layers.transformer import TransformerBlock
from vit_keras.models.build import _preprocessing_layer, build_vit
from vit_keras.models.inputs import INPUT_NAME
from vit_keras.vision_transformer import FINAL_NORM_LAYER, VisionTransformer

VITPOSE_PATCH_PADDING = 2  # VitPoseBackbone's patch convolution pads every side by 2 pixels


@dataclasses.dataclass(frozen=True)
class SegmentationHead:
    """EoMT's head: `num_queries` queries join before the last `num_blocks` blocks; `masked_blocks[j]` says whether
    block `L - num_blocks + j` restricts the queries' attention to their current masks (`attn_mask_probs` > 0);
    `num_labels` classes (+ no-object); `num_upscale_blocks` x2 upscalings of the patch map for the masks."""

    num_queries: int
    num_blocks: int
    masked_blocks: tuple[bool, ...]
    num_labels: int
    num_upscale_blocks: int
    activation: str = "gelu"


@dataclasses.dataclass(frozen=True)
class DepthHeadConfig:
    """Depth Anything's neck and head: the backbone `stages` read (transformers' `out_features`), whether they go
    through the backbone's final norm (`apply_layernorm`), the DPT neck's sizes and the output's kind and scale."""

    stages: tuple[str, ...]
    apply_layernorm: bool
    neck_hidden_sizes: tuple[int, ...]
    reassemble_factors: tuple[float, ...]
    fusion_hidden_size: int
    head_hidden_size: int
    depth_estimation_type: str = "relative"
    max_depth: float = 1.0


@dataclasses.dataclass(frozen=True)
class PoseHead:
    """ViTPose's decoder on the backbone's `stage` (through its final norm): `"simple"` or `"classic"`."""

    num_keypoints: int
    decoder: str = "simple"
    scale_factor: int = 4
    stage: str | None = None


def _images(config: ViTConfig, include_preprocessing: bool, normalization):
    inputs = keras.Input(shape=(*(config.image_size or (None, None)), 3), name=INPUT_NAME)
    x = _preprocessing_layer(normalization, 3)(inputs) if include_preprocessing else inputs
    return inputs, x


def _backbone(config: ViTConfig, inputs, x):
    """`config`'s ViT (no head) on `x`, a tensor computed from the images `inputs`, as a model on `inputs` itself
    (so that `vit_keras.features` reads its patch grid off the images)."""
    tokens = build_vit(config, include_top=False, include_preprocessing=False, input_tensor=x).output
    backbone = VisionTransformer(inputs, tokens, name="backbone")
    backbone.vit_config = config
    return backbone


def eomt_model(config: ViTConfig, head: SegmentationHead, *, include_preprocessing: bool = True,
               normalization=None, name: str = "eomt") -> keras.Model:
    """EoMT: `config`'s ViT (all its blocks) with `head`'s queries in its last `head.num_blocks` blocks."""
    first = config.num_layers - head.num_blocks
    if not 0 < first < config.num_layers:
        raise ValueError(f"num_blocks={head.num_blocks} must be between 1 and num_hidden_layers - 1 "
                         f"({config.num_layers - 1}): the queries join before one of the blocks after the first.")
    inputs, x = _images(config, include_preprocessing, normalization)
    tokens = _backbone(config.replace(num_layers=first, final_norm=False), inputs, x).output
    prefix = config.num_prefix_tokens
    rows, cols = config.grid_size
    norm = norm_layer(config.norm, config.layer_norm_epsilon, name=FINAL_NORM_LAYER)
    class_head = keras.layers.Dense(head.num_labels + 1, name="class_head")
    mask_head = EomtMaskHead(head.activation, name="mask_head")
    upscale = EomtUpscale(head.num_upscale_blocks, head.activation, name="upscale")

    def predict(tokens):
        normed = norm(tokens)
        queries = normed[:, : head.num_queries]
        patches = ops.reshape(normed[:, head.num_queries + prefix:], (-1, rows, cols, config.hidden_size))
        masks = ops.einsum("bqc,bhwc->bhwq", mask_head(queries), upscale(patches))
        return masks, class_head(queries)

    tokens = QueryTokens(head.num_queries, name="queries")(tokens)
    attention_mask = None
    mask_from = QueryAttentionMask(head.num_queries, prefix, config.grid_size, name="query_attention_mask")
    for offset, masked in enumerate(head.masked_blocks):
        if masked:
            attention_mask = mask_from(predict(tokens)[0])
        block = TransformerBlock(block=config.block, name=f"Transformer_encoderblock_{first + offset}")
        tokens = block(tokens) if attention_mask is None else block(tokens, attention_mask=attention_mask)
    masks, classes = predict(tokens)
    return keras.Model(inputs, {"class_queries_logits": classes, "masks_queries_logits": masks}, name=name)


def depth_anything_model(config: ViTConfig, head: DepthHeadConfig, *, include_preprocessing: bool = True,
                         normalization=None, name: str = "depth_anything") -> keras.Model:
    """Depth Anything: `config`'s DINOv2 at its image size, `head.stages` through the DPT neck and the depth head."""
    inputs, x = _images(config, include_preprocessing, normalization)
    backbone = _backbone(config, inputs, x)
    maps = intermediate_model(backbone, list(head.stages), norm=head.apply_layernorm).outputs
    maps = maps if isinstance(maps, (list, tuple)) else [maps]
    fused = DPTNeck(head.neck_hidden_sizes, head.reassemble_factors, head.fusion_hidden_size, name="neck")(maps)
    depth = DepthHead(head.head_hidden_size, config.patch_size, head.depth_estimation_type, head.max_depth,
                      name="depth_head")(fused, inputs)
    return keras.Model(inputs, {"predicted_depth": depth}, name=name)


def vitpose_model(config: ViTConfig, head: PoseHead, *, include_preprocessing: bool = True, normalization=None,
                  name: str = "vitpose") -> keras.Model:
    """ViTPose: the image shifted by the patch convolution's padding, `config`'s ViT (no class token), `head.stage`
    (default the last block) through the final norm, and the decoder."""
    inputs, x = _images(config, include_preprocessing, normalization)
    x = PatchPadding(VITPOSE_PATCH_PADDING, name="patch_padding")(x)
    backbone = _backbone(config, inputs, x)
    feature_map = intermediate_model(backbone, [head.stage or f"stage{config.num_layers}"], norm=True).outputs[0]
    decoder = VitPoseSimpleDecoder(head.num_keypoints, head.scale_factor, name="pose_head") \
        if head.decoder == "simple" else VitPoseClassicDecoder(head.num_keypoints, name="pose_head")
    return keras.Model(inputs, {"heatmaps": decoder(feature_map)}, name=name)
