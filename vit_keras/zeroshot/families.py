"""What distinguishes CLIP, SigLIP and SigLIP 2 as image-text models: one row of data per transformers
`model_type`, read by the checkpoint reader, the model builder, the writer and the tokenizer. Each row names the
vision tower's row (`vit_keras.weights.hf_family_rows`), the text tower's rule table and the heads' (logit scale
and bias, projections): `vit_keras.weights.rules` tables over the canonical names (`vit_keras.weights.schema`),
read with `rules.apply_table` and written back with `rules.invert_table`.

Example:
    >>> FAMILIES["siglip"].logit_bias, FAMILIES["clip"].text_pooling
    (True, 'first_eos')
    >>> FAMILIES["clip"].vision.table.family
    'Hugging Face clip_vision_model'
"""

from __future__ import annotations

import dataclasses

from vit_keras.weights import hf_family_rows, rules, schema
from vit_keras.weights.hf_family_record import Family as VisionFamily

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)


@dataclasses.dataclass(frozen=True)
class Family:
    """One image-text model family as transformers implements it.

    `vision_model_type`: the vision tower's own `model_type` (what `vit_keras.from_pretrained` reads);
    `vision_pooling`: its `pooler_output` (`"token"`: post-LN class token; `"map"`: the attention-pooling head);
    `visual_projection`: the Linear after it, if any. Text: `causal`, `text_pooling`, `text_projection` (the source
    module) and its bias. (Whether the text tower reads the padding mask is the tokenizer's to say:
    `vit_keras.zeroshot.tokenizer.returns_attention_mask`.)
    `logit_bias`: SigLIP's learned bias on the logits. `probabilities`: how `classify` turns logits into scores
    (softmax over classes for the contrastively trained CLIP, a sigmoid per pair for SigLIP). `mean`, `std`: the
    image processor's defaults, when the checkpoint has no `preprocessor_config.json`. `text_table`, `head_table`:
    the rule tables of the text tower's tensors and of the heads' (the vision tower's is its row's, `vision`).
    """

    model_class: str
    vision_model_type: str
    vision_pooling: str
    visual_projection: str | None
    causal: bool
    text_pooling: str
    text_projection: str
    text_projection_bias: bool
    logit_bias: bool
    probabilities: str
    mean: tuple
    std: tuple
    text_table: rules.Table
    head_table: rules.Table

    @property
    def vision(self) -> VisionFamily:
        """The vision tower's row (`vit_keras.weights.hf_family_rows`)."""
        return hf_family_rows.FAMILIES[self.vision_model_type]


def text_table(name: str, layer: str, embeddings: tuple[str, str], final_norm: str,
               projection: rules.Rule) -> rules.Table:
    """A text tower's rule table: the token and position tables, `layer.{i}` blocks in transformers' CLIP layout,
    the final norm and the projection.

    Example:
        >>> len(text_table("toy", "layers.{i}", ("tok", "pos"), "ln", rules.Rule("proj", "text_projection",
        ...                                                                         rules.LINEAR)).rules)
        12
    """
    block = f"{layer}."
    attention = [rules.Rule(f"{block}self_attn.{source}_proj", f"{schema.TEXT_BLOCK_ATTENTION}/{target}",
                            rules.HEADS_IN, required=True)
                 for source, target in zip("qkv", ("query", "key", "value"))]
    return rules.Table(name, (
        rules.Rule(embeddings[0], f"{schema.TEXT_EMBEDDING}/token_embedding", rules.ARRAY, required=True),
        rules.Rule(embeddings[1], f"{schema.TEXT_EMBEDDING}/position_embedding", rules.ARRAY, required=True),
        rules.Rule(f"{block}layer_norm1", schema.TEXT_BLOCK_NORM_1, rules.NORM, required=True),
        *attention,
        rules.Rule(f"{block}self_attn.out_proj", f"{schema.TEXT_BLOCK_ATTENTION}/out", rules.HEADS_OUT,
                   required=True),
        rules.Rule(f"{block}layer_norm2", schema.TEXT_BLOCK_NORM_2, rules.NORM, required=True),
        rules.Rule(f"{block}mlp.fc1", schema.TEXT_BLOCK_MLP_IN, rules.LINEAR, required=True),
        rules.Rule(f"{block}mlp.fc2", schema.TEXT_BLOCK_MLP_OUT, rules.LINEAR, required=True),
        rules.Rule(final_norm, schema.TEXT_FINAL_NORM, rules.NORM, required=True),
        projection,
    ))


def _transformers_text(model_type: str, projection: rules.Rule) -> rules.Table:
    text = "text_model"
    return text_table(f"Hugging Face {model_type} text tower", f"{text}.encoder.layers.{{i}}",
                      (f"{text}.embeddings.token_embedding", f"{text}.embeddings.position_embedding"),
                      f"{text}.final_layer_norm", projection)


_LOGIT_SCALE = rules.Rule(schema.LOGIT_SCALE, schema.LOGIT_SCALE, rules.scalar(0), required=True)
# SigLIP stores its logit scale and bias as (1,) tensors, CLIP its scale as a ().
_SIGLIP_TEXT = _transformers_text("siglip", rules.Rule("text_model.head", schema.TEXT_PROJECTION, rules.LINEAR,
                                                       required=True))
_SIGLIP_HEADS = rules.Table("Hugging Face siglip heads", (
    dataclasses.replace(_LOGIT_SCALE, transform=rules.scalar(1)),
    rules.Rule(schema.LOGIT_BIAS, schema.LOGIT_BIAS, rules.scalar(1), required=True),
))

FAMILIES = {
    "clip": Family(model_class="CLIPModel", vision_model_type="clip_vision_model", vision_pooling="token",
                   visual_projection="visual_projection", causal=True,
                   text_pooling="first_eos", text_projection="text_projection", text_projection_bias=False,
                   logit_bias=False, probabilities="softmax", mean=OPENAI_CLIP_MEAN, std=OPENAI_CLIP_STD,
                   text_table=_transformers_text("clip", rules.Rule("text_projection", schema.TEXT_PROJECTION,
                                                                    rules.LINEAR_NO_BIAS, required=True)),
                   head_table=rules.Table("Hugging Face clip heads", (
                       rules.Rule("visual_projection", schema.VISUAL_PROJECTION, rules.LINEAR_NO_BIAS, required=True),
                       _LOGIT_SCALE))),
    "siglip": Family(model_class="SiglipModel", vision_model_type="siglip_vision_model", vision_pooling="map",
                     visual_projection=None, causal=False, text_pooling="last",
                     text_projection="text_model.head", text_projection_bias=True, logit_bias=True,
                     probabilities="sigmoid", mean=HALF, std=HALF, text_table=_SIGLIP_TEXT,
                     head_table=_SIGLIP_HEADS),
    "siglip2": Family(model_class="Siglip2Model", vision_model_type="siglip2_vision_model", vision_pooling="map",
                      visual_projection=None, causal=False, text_pooling="last",
                      text_projection="text_model.head", text_projection_bias=True, logit_bias=True,
                      probabilities="sigmoid", mean=HALF, std=HALF, text_table=_SIGLIP_TEXT,
                     head_table=_SIGLIP_HEADS),
}
