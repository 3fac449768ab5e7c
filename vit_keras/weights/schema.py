"""The canonical checkpoint names: every array a vit_keras model can take, under the raw names of the public vit_jax
files (`gs://vit_models`), which every reader produces and `assign_params` consumes.

The names are written here once, as templates: `{i}` is an encoder block, `{s}`/`{u}` a ResNet stage and unit.
The image-text models' text tower (`TEXT_NAMES`) and the heads that join the towers (`HEAD_NAMES`) are declared
here too, so that their tables are checked by the same code and run backwards as the vision tables.
The layers declare the same names for their variables (`vit_keras.layers.checkpoint`); the tests check that the two
agree, and every reader's table is checked against this list when it is made, so a mistyped target fails at import
time, not as a half-loaded model.

RMSNorms fill the same norm slots as LayerNorms and declare a `scale` only.

Layouts (the vit_jax ones): dense kernels `(in, out)`; the patch kernel `(P, P, C, D)`; q/k/v kernels
`(D, heads, D/heads)` with `(heads, D/heads)` biases; the attention output kernel `(heads, D/heads, D)`; tokens
and the position table `(1, n, D)`; norms `scale`/`bias` vectors.

Example:
    >>> is_canonical("Transformer/encoderblock_3/MultiHeadDotProductAttention_1/query/kernel")
    True
    >>> is_canonical("Transformer/encoderblock_3/attn/qkv/kernel")
    False
"""

from __future__ import annotations

import functools
import re

from vit_keras.layers.encoder import POS_EMBEDDING_NAME
from vit_keras.weights.task_schema import TASK_NAMES

POS_EMBEDDING = POS_EMBEDDING_NAME  # declared by the layer that holds it
BLOCK = "Transformer/encoderblock_{i}"
BLOCK_NORM_1 = BLOCK + "/LayerNorm_0"
BLOCK_NORM_2 = BLOCK + "/LayerNorm_2"
BLOCK_ATTENTION = BLOCK + "/MultiHeadDotProductAttention_1"
BLOCK_MLP_IN = BLOCK + "/MlpBlock_3/Dense_0"
BLOCK_MLP_OUT = BLOCK + "/MlpBlock_3/Dense_1"
BLOCK_MLP_GATE = BLOCK + "/MlpBlock_3/Dense_0_gate"  # SwiGLU split form; the packed form's [gate; value] is Dense_0
BLOCK_MLP_VALUE = BLOCK + "/MlpBlock_3/Dense_0_value"
BLOCK_MLP_NORM = BLOCK + "/MlpBlock_3/norm"  # the norm on a SwiGLU's hidden layer (EVA-02's sub-LN)
ROPE_FREQS = "rope/freqs"  # RoPE-Mixed's learned frequencies (2, depth, heads, head_dim/2)
BLOCK_SCALE_1 = BLOCK + "/LayerScale_1"
BLOCK_SCALE_2 = BLOCK + "/LayerScale_3"
ENCODER_NORM = "Transformer/encoder_norm"
MAP_HEAD = "MAPHead_0"
MAP_ATTENTION = MAP_HEAD + "/MultiHeadDotProductAttention_0"
MAP_NORM = MAP_HEAD + "/LayerNorm_0"
MAP_MLP_IN = MAP_HEAD + "/MlpBlock_0/Dense_0"
MAP_MLP_OUT = MAP_HEAD + "/MlpBlock_0/Dense_1"
PROJECTIONS = ("query", "key", "value", "out")

_DENSE = ("kernel", "bias")
_NORM = ("scale", "bias")


def _names(prefix: str, params) -> list[str]:
    return [f"{prefix}/{param}" for param in params]


def _attention(prefix: str) -> list[str]:
    return [name for projection in PROJECTIONS for name in _names(f"{prefix}/{projection}", _DENSE)]


# Every canonical name, as a template. Grouped by the layer that declares it (its `checkpoint_variables`).
CANONICAL_NAMES: tuple[str, ...] = (
    # PatchEncoder
    "embedding/kernel", "embedding/bias", "cls", "dist", "reg", POS_EMBEDDING, *_names("patch_norm", _NORM),
    # the LayerNorm before the encoder (CLIP's ln_pre, timm's norm_pre)
    *_names("pre_norm", _NORM),
    # TransformerBlock
    *_names(BLOCK_NORM_1, _NORM), *_names(BLOCK_NORM_2, _NORM), *_attention(BLOCK_ATTENTION),
    *_names(BLOCK_MLP_IN, _DENSE), *_names(BLOCK_MLP_OUT, _DENSE),
    f"{BLOCK_SCALE_1}/scale", f"{BLOCK_SCALE_2}/scale",
    # SwiGLUBlock (in the MlpBlock_3 slot)
    *_names(BLOCK_MLP_GATE, _DENSE), *_names(BLOCK_MLP_VALUE, _DENSE), *_names(BLOCK_MLP_NORM, _NORM),
    # RotaryEmbedding2D ("mixed" layout)
    ROPE_FREQS,
    # the final norm over every token, or after pooling
    *_names(ENCODER_NORM, _NORM), *_names("fc_norm", _NORM),
    # MAPHead
    f"{MAP_HEAD}/probe", *_names(MAP_NORM, _NORM), *_attention(MAP_ATTENTION), *_names(MAP_MLP_IN, _DENSE),
    *_names(MAP_MLP_OUT, _DENSE),
    # the classifier
    *_names("pre_logits", _DENSE), *_names("head", _DENSE), *_names("head_dist", _DENSE),
    # ResNetStem (hybrids); its convolutions have no bias
    "conv_root/kernel", *_names("gn_root", _NORM),
    *[f"block{{s}}/unit{{u}}/{conv}/kernel" for conv in ("conv1", "conv2", "conv3", "conv_proj")],
    *[name for gn in ("gn1", "gn2", "gn3", "gn_proj") for name in _names(f"block{{s}}/unit{{u}}/{gn}", _NORM)],
    # the task heads (EoMT, Depth Anything, ViTPose)
    *TASK_NAMES,
)

# The text tower of an image-text model (`vit_keras.zeroshot.text`): the token and position tables, the vision
# side's encoder block under `text_block_{i}` (the same part names), the final norm and the projection.
TEXT_EMBEDDING = "text_embedding"
TEXT_BLOCK = "text_block_{i}"
TEXT_BLOCK_NORM_1 = BLOCK_NORM_1.replace(BLOCK, TEXT_BLOCK)
TEXT_BLOCK_NORM_2 = BLOCK_NORM_2.replace(BLOCK, TEXT_BLOCK)
TEXT_BLOCK_ATTENTION = BLOCK_ATTENTION.replace(BLOCK, TEXT_BLOCK)
TEXT_BLOCK_MLP_IN = BLOCK_MLP_IN.replace(BLOCK, TEXT_BLOCK)
TEXT_BLOCK_MLP_OUT = BLOCK_MLP_OUT.replace(BLOCK, TEXT_BLOCK)
TEXT_FINAL_NORM = "final_layer_norm"
TEXT_PROJECTION = "text_projection"
TEXT_NAMES: tuple[str, ...] = (
    f"{TEXT_EMBEDDING}/token_embedding", f"{TEXT_EMBEDDING}/position_embedding",
    *_names(TEXT_BLOCK_NORM_1, _NORM), *_names(TEXT_BLOCK_NORM_2, _NORM), *_attention(TEXT_BLOCK_ATTENTION),
    *_names(TEXT_BLOCK_MLP_IN, _DENSE), *_names(TEXT_BLOCK_MLP_OUT, _DENSE),
    *_names(TEXT_FINAL_NORM, _NORM), *_names(TEXT_PROJECTION, _DENSE),
)
# What joins the towers (`vit_keras.zeroshot.logits`, `vit_keras.zeroshot.vision`): CLIP's Linear after the vision
# pooler, the logit scale (used as exp) and SigLIP's logit bias, scalars.
VISUAL_PROJECTION = "visual_projection"
LOGIT_SCALE = "logit_scale"
LOGIT_BIAS = "logit_bias"
HEAD_NAMES: tuple[str, ...] = (f"{VISUAL_PROJECTION}/kernel", LOGIT_SCALE, LOGIT_BIAS)
# Every name a rule table may target: one namespace for every tower and head (the prefixes keep them apart).
ALL_NAMES: tuple[str, ...] = (*CANONICAL_NAMES, *TEXT_NAMES, *HEAD_NAMES)


def architecture_shapes(fields) -> dict[str, tuple[int, ...]]:
    """The shapes that the architecture (`ViTConfig` fields: hidden size D, heads H, MLP size M, patch size P) fixes
    for canonical names (templates), in the layouts above: norms and layer scales `(D,)`; q/k/v kernels `(D, H, D/H)`
    and biases `(H, D/H)`; the attention output kernel `(H, D/H, D)`; the MLP's `(D, M)` and `(M, D)` (a SwiGLU's
    gate and value `(D, M)` each, packed `(D, 2M)`); the RGB patch kernel `(P, P, 3, D)`. Names whose shape depends
    on more (heads, tokens, a ResNet stem) are left out. Empty when the fields do not give D and H.

    Example:
        >>> architecture_shapes({"hidden_size": 48, "num_heads": 3, "mlp_dim": 96})[BLOCK_ATTENTION + "/query/kernel"]
        (48, 3, 16)
    """
    hidden, heads = fields.get("hidden_size"), fields.get("num_heads")
    if not isinstance(hidden, int) or not isinstance(heads, int) or heads <= 0 or hidden % heads:
        return {}
    head_dim = hidden // heads
    shapes: dict[str, tuple[int, ...]] = {}
    for norm in (BLOCK_NORM_1, BLOCK_NORM_2, ENCODER_NORM, "fc_norm", "pre_norm", "patch_norm"):
        shapes.update({name: (hidden,) for name in _names(norm, _NORM)})
    for projection in PROJECTIONS[:3]:
        shapes[f"{BLOCK_ATTENTION}/{projection}/kernel"] = (hidden, heads, head_dim)
        shapes[f"{BLOCK_ATTENTION}/{projection}/bias"] = (heads, head_dim)
    shapes[f"{BLOCK_ATTENTION}/out/kernel"] = (heads, head_dim, hidden)
    shapes[f"{BLOCK_ATTENTION}/out/bias"] = (hidden,)
    shapes[f"{BLOCK_SCALE_1}/scale"] = shapes[f"{BLOCK_SCALE_2}/scale"] = (hidden,)
    shapes[f"{BLOCK_MLP_OUT}/bias"] = (hidden,)
    mlp, mlp_dim = fields.get("mlp") or "gelu", fields.get("mlp_dim")
    if isinstance(mlp_dim, int) and mlp in ("gelu", "swiglu", "swiglu_packed"):
        # SwiGLU (vit_keras.layers.swiglu): gate and value of mlp_dim each, split or packed as one [gate; value].
        inputs = {"gelu": ((BLOCK_MLP_IN, mlp_dim),), "swiglu_packed": ((BLOCK_MLP_IN, 2 * mlp_dim),),
                  "swiglu": ((BLOCK_MLP_GATE, mlp_dim), (BLOCK_MLP_VALUE, mlp_dim))}[mlp]
        for name, width in inputs:
            shapes.update({f"{name}/kernel": (hidden, width), f"{name}/bias": (width,)})
        shapes[f"{BLOCK_MLP_OUT}/kernel"] = (mlp_dim, hidden)
        shapes.update({name: (mlp_dim,) for name in _names(BLOCK_MLP_NORM, _NORM)})
    patch = fields.get("patch_size")
    if isinstance(patch, int) and not fields.get("resnet"):
        shapes.update({"embedding/kernel": (patch, patch, 3, hidden), "embedding/bias": (hidden,)})
    return shapes


def template_regex(template: str, named: bool = True) -> re.Pattern:
    """A template with `{name}` placeholders as an anchored regex whose named groups capture them.

    Example:
        >>> template_regex("blocks.{i}.attn.qkv").match("blocks.11.attn.qkv")["i"]
        '11'
    """
    parts = re.split(r"\{(\w+)\}", template)
    pattern = "".join(re.escape(part) if index % 2 == 0 else f"(?P<{part}>\\d+)" if named else r"\d+"
                      for index, part in enumerate(parts))
    return re.compile(f"^{pattern}$")


@functools.cache
def _schema() -> re.Pattern:
    return re.compile("|".join(f"(?:{template_regex(name, named=False).pattern})" for name in ALL_NAMES))


def is_canonical(name: str) -> bool:
    """Whether `name` is one of the canonical names (`ALL_NAMES`: the vision towers', the text towers' and the
    heads') with its placeholders filled in.

    Example:
        >>> is_canonical("block2/unit1/gn_proj/scale"), is_canonical("text_block_1/LayerNorm_0/scale")
        (True, True)
    """
    return _schema().match(name) is not None


def is_canonical_template(template: str) -> bool:
    """Whether a template (placeholders unfilled, e.g. a table's target) names only canonical arrays.

    Example:
        >>> is_canonical_template("Transformer/encoderblock_{i}/LayerNorm_0/scale")
        True
    """
    return is_canonical(re.sub(r"\{\w+\}", "0", template))
