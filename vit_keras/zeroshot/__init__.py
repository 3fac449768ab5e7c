"""Zero-shot image classification and image-text retrieval with CLIP, SigLIP and SigLIP 2: both towers, the
logits that join them, the tokenizer the checkpoint ships, contrastive fine-tuning losses and export.

Example:
    >>> from vit_keras import zeroshot
    >>> m = zeroshot.from_pretrained("tests/fixtures/zeroshot/clip/checkpoint")  # a CLIPModel directory
    >>> ids, mask = m.tokenize(["a photo of a cat", "a photo of a dog"])
    >>> m.encode_text(ids, mask).shape
    (2, 24)
"""

from vit_keras.zeroshot.image_text_model import ZeroShotModel, from_pretrained
from vit_keras.zeroshot.logits import ContrastiveLogits, l2_normalize
from vit_keras.zeroshot.text import TextBlock, TextEmbedding, TextPooling, text_model
from vit_keras.zeroshot.text_config import TextConfig
from vit_keras.zeroshot.tokenizer import Tokenizer

__all__ = [
    "ContrastiveLogits",
    "TextBlock",
    "TextConfig",
    "TextEmbedding",
    "TextPooling",
    "Tokenizer",
    "ZeroShotModel",
    "from_pretrained",
    "l2_normalize",
    "text_model",
]
