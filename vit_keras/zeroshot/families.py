"""What distinguishes CLIP, SigLIP and SigLIP 2 as image-text models: one row of data per transformers
`model_type`, read by the checkpoint reader, the model builder and the tokenizer.

Example:
    >>> FAMILIES["siglip"].logit_bias, FAMILIES["clip"].text_pooling
    (True, 'first_eos')
"""

from __future__ import annotations

import dataclasses

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
    image processor's defaults, when the checkpoint has no `preprocessor_config.json`.
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


FAMILIES = {
    "clip": Family(model_class="CLIPModel", vision_model_type="clip_vision_model", vision_pooling="token",
                   visual_projection="visual_projection", causal=True,
                   text_pooling="first_eos", text_projection="text_projection", text_projection_bias=False,
                   logit_bias=False, probabilities="softmax", mean=OPENAI_CLIP_MEAN, std=OPENAI_CLIP_STD),
    "siglip": Family(model_class="SiglipModel", vision_model_type="siglip_vision_model", vision_pooling="map",
                     visual_projection=None, causal=False, text_pooling="last",
                     text_projection="text_model.head", text_projection_bias=True, logit_bias=True,
                     probabilities="sigmoid", mean=HALF, std=HALF),
    "siglip2": Family(model_class="Siglip2Model", vision_model_type="siglip2_vision_model", vision_pooling="map",
                      visual_projection=None, causal=False, text_pooling="last",
                      text_projection="text_model.head", text_projection_bias=True, logit_bias=True,
                      probabilities="sigmoid", mean=HALF, std=HALF),
}
