"""`ZeroShotModel`: an image tower, a text tower, the logits that join them and the checkpoint's tokenizer.

Example:
    >>> m = from_pretrained("tests/fixtures/zeroshot/siglip/checkpoint")  # a SiglipModel directory
    >>> images = np.random.default_rng(0).uniform(0, 255, (1, 32, 32, 3)).astype("float32")
    >>> scores = m.classify(images, ["cat", "dog", "car"])
    >>> scores.shape, m.family
    ((1, 3), 'siglip')
"""

from __future__ import annotations

import os

import keras
import numpy as np

from vit_keras.configs import ViTConfig
from vit_keras.probabilities import probabilities
from vit_keras.weights import hub
from vit_keras.weights.assign import assign_slots
from vit_keras.zeroshot import hub_files
from vit_keras.zeroshot.hf_reader import Checkpoint, read_checkpoint
from vit_keras.zeroshot.logits import ContrastiveLogits, l2_normalize
from vit_keras.zeroshot.text import ATTENTION_MASK, TOKEN_IDS, text_model, text_slots
from vit_keras.zeroshot.text_config import TextConfig
from vit_keras.zeroshot.tokenizer import Tokenizer
from vit_keras.zeroshot.vision import head_slots, image_model_and_config

TEXT_BATCH = 256  # texts encoded at a time
_FIX = "Check that the file and its config.json describe the same model."


class ZeroShotModel:
    """Image and text towers with their logits and tokenizer.

    `image_model`: images → image features (RGB in [0, 255] when `include_preprocessing`); `text_model`:
    `{"token_ids", "attention_mask"}` → text features (both projected, not normalised; Keras models, any backend).
    `logits_layer`: `ContrastiveLogits` with the checkpoint's scale (and SigLIP's bias). `family`: `"clip"`,
    `"siglip"` or `"siglip2"`. `patch_size`: the vision tower's. `vision_config` (`ViTConfig`), `text_config`
    (`TextConfig`) and `layout` (`"transformers"` or `"open_clip"`, the files it was read from) are what
    `save_pretrained` writes the model as; a model built without them cannot be saved that way.
    """

    def __init__(self, image_model: keras.Model, text_model: keras.Model, logits_layer: ContrastiveLogits,
                 tokenizer: Tokenizer | None, family: str, probabilities: str, patch_size: int | None = None,
                 include_preprocessing: bool = True, *, vision_config: ViTConfig | None = None,
                 text_config: TextConfig | None = None, layout: str | None = None):
        self.image_model, self.text_model, self.logits_layer = image_model, text_model, logits_layer
        self.tokenizer, self.family, self.probabilities = tokenizer, family, probabilities
        self.patch_size, self.include_preprocessing = patch_size, bool(include_preprocessing)
        self.vision_config, self.text_config, self.layout = vision_config, text_config, layout

    def save_pretrained(self, directory, format: str | None = None, *, overwrite: bool = False) -> str:
        """Write the model as a transformers directory (`format="transformers"`, the default: `AutoModel` loads it
        strictly) or, for a model read from open_clip's files, as open_clip's (`format="open_clip"`), with its
        tokenizer's files; see `vit_keras.zeroshot.save_pretrained.save_pretrained`."""
        from vit_keras.zeroshot.save_pretrained import save_pretrained

        return save_pretrained(self, directory, format=format, overwrite=overwrite)

    @property
    def image_size(self):
        """(height, width) the image model takes, or None when it takes any size (SigLIP 2) or the NaFlex dict."""
        shape = self.image_model.input_shape
        if isinstance(shape, dict) or None in tuple(shape[1:3]):
            return None
        return tuple(int(side) for side in shape[1:3])

    @property
    def context_length(self) -> int:
        return int(self.text_model.get_layer("text_embedding").context_length)

    @property
    def vocab_size(self) -> int:
        """Rows of the text tower's token embedding: token ids run from 0 to vocab_size - 1."""
        return int(self.text_model.get_layer("text_embedding").vocab_size)

    def tokenize(self, texts):
        """`(token_ids, attention_mask)`: int32 (len(texts), context_length), the checkpoint tokenizer's ids padded
        as the model expects; the mask is None for SigLIP, whose reference passes none."""
        if self.tokenizer is None:
            raise ValueError("This model has no tokenizer; pass token ids to encode_text.")
        return self.tokenizer(texts)

    def encode_image(self, images):
        """Projected image features (N, E), not normalised; `images` as `image_model` takes them."""
        self._check_images(images)
        return np.asarray(keras.ops.convert_to_numpy(self.image_model(images, training=False)))

    def _check_images(self, images) -> None:
        """Refuse images the image model would misread: not (N, H, W, 3), or not at its fixed size."""
        if isinstance(images, dict) or isinstance(self.image_model.input, dict):
            return  # the NaFlex dict: its layers check it
        shape = tuple(images.shape) if hasattr(images, "shape") else np.shape(images)
        if len(shape) != 4 or shape[-1] != 3:
            fix = (" For grayscale images repeat the channel (np.repeat(images, 3, axis=-1)); for RGBA drop the "
                   "alpha channel (images[..., :3])." if len(shape) == 4 else " Add the batch axis for one image "
                   "(images[None]).")
            raise ValueError(f"encode_image: images must be RGB of shape (batch, height, width, 3), got shape "
                             f"{shape}.{fix}")
        if self.image_size is not None and tuple(shape[1:3]) != self.image_size:
            raise ValueError(f"encode_image: this model takes {self.image_size[0]}x{self.image_size[1]} images, got "
                             f"{shape[1]}x{shape[2]}; resize them, or build the model for that size with "
                             f"vit_keras.zeroshot.from_pretrained(..., image_size=({shape[1]}, {shape[2]})).")

    def encode_text(self, token_ids, attention_mask=None):
        """Projected text features (T, E), not normalised. `attention_mask` None: every position is real."""
        token_ids = np.asarray(token_ids)
        if token_ids.ndim != 2:
            raise ValueError(f"encode_text: token_ids must be (texts, tokens), got shape {token_ids.shape}.")
        self._check_token_ids(token_ids)
        if token_ids.shape[1] > self.context_length:
            raise ValueError(f"encode_text: {token_ids.shape[1]} tokens per text, more than the context length "
                             f"{self.context_length}; tokenize with m.tokenize, which truncates.")
        mask = np.ones(token_ids.shape, np.int32) if attention_mask is None else np.asarray(attention_mask, np.int32)
        if mask.shape != token_ids.shape:
            raise ValueError(f"encode_text: attention_mask has shape {mask.shape}, token_ids {token_ids.shape}.")
        # In batches: a prompt ensemble over many classes is tens of thousands of texts.
        parts = [self.text_model({TOKEN_IDS: token_ids[start:start + TEXT_BATCH].astype(np.int32),
                                  ATTENTION_MASK: mask[start:start + TEXT_BATCH]}, training=False)
                 for start in range(0, len(token_ids), TEXT_BATCH)]
        return np.concatenate([np.asarray(keras.ops.convert_to_numpy(part)) for part in parts])

    def _check_token_ids(self, token_ids) -> None:
        """Refuse ids the embedding would misread: not whole numbers (a cast would truncate them) or outside
        [0, vocab_size) (a negative id would take a row from the end)."""
        if token_ids.dtype.kind not in "iu":
            whole = token_ids.dtype.kind == "f" and bool(np.all(np.isfinite(token_ids)
                                                                & (token_ids == np.round(token_ids))))
            if not whole:
                raise ValueError(f"encode_text: token_ids must be whole numbers in [0, {self.vocab_size}), got "
                                 f"{token_ids.dtype} values such as {token_ids.ravel()[:3].tolist()}; tokenize with "
                                 "m.tokenize, which gives int32 ids.")
        if token_ids.size and (token_ids.min() < 0 or token_ids.max() >= self.vocab_size):
            wrong = token_ids[(token_ids < 0) | (token_ids >= self.vocab_size)]
            raise ValueError(f"encode_text: token ids must be in [0, {self.vocab_size}) (the text tower's vocabulary), "
                             f"got {sorted({int(v) for v in wrong})[:5]}; tokenize with m.tokenize.")

    def logits(self, image_features, text_features):
        """`logits_per_image` (N, T): exp(logit_scale) · cosine (+ logit_bias); `.T` is `logits_per_text`."""
        return np.asarray(keras.ops.convert_to_numpy(self.logits_layer(
            np.asarray(image_features, np.float32), np.asarray(text_features, np.float32))))

    def class_text_features(self, class_names, templates=None):
        """One normalised text embedding per class: the prompt `templates` (default: the class name alone), each
        embedded, normalised and averaged per class, the mean renormalised (CLIP's prompt ensembling)."""
        if isinstance(class_names, (str, bytes)):
            raise ValueError(f"classify: class_names must be a list of names, got the string {class_names!r}, whose "
                             f"characters would each be a class; pass [{class_names!r}] for one class.")
        class_names = list(class_names)
        if not class_names:
            raise ValueError("classify: got no class names; pass at least one label.")
        blank = [index for index, name in enumerate(class_names) if not str(name).strip()]
        if blank:
            raise ValueError(f"classify: class name(s) at position {blank} are empty; every label needs text "
                             "(remove the empty entries from the class list).")
        seen, repeated = set(), []
        for name in class_names:
            if name in seen and name not in repeated:
                repeated.append(name)
            seen.add(name)
        if repeated:
            raise ValueError(f"classify: the class names {repeated[:5]} appear more than once, so each would be "
                             "scored twice; pass every class once.")
        if templates is None:
            prompts, count = class_names, 1
        else:
            templates = [templates] if isinstance(templates, str) else list(templates)
            if not templates or not all(isinstance(t, str) and "{}" in t for t in templates):
                raise ValueError(f"classify: templates must be strings with a '{{}}' for the class name, got "
                                 f"{templates!r}.")
            # replace, not format: other braces in a template or a class name stay as they are
            prompts = [template.replace("{}", name) for name in class_names for template in templates]
            count = len(templates)
        features = l2_normalize(self.encode_text(*self.tokenize(prompts)))
        features = keras.ops.mean(keras.ops.reshape(features, (len(class_names), count, -1)), axis=1)
        return np.asarray(keras.ops.convert_to_numpy(l2_normalize(features)))

    def classify(self, images, class_names, templates=None):
        """Scores (N, classes): softmax over the classes for CLIP, a sigmoid per class for SigLIP."""
        logits = self.logits(self.encode_image(images), self.class_text_features(class_names, templates))
        return np.asarray(keras.ops.convert_to_numpy(probabilities(logits, self.probabilities)))


def build(checkpoint: Checkpoint, *, include_preprocessing: bool = True, image_size=None, flexible: bool = False,
          tokenizer: Tokenizer | None = None) -> ZeroShotModel:
    """The `ZeroShotModel` of a read checkpoint."""
    text = text_model(checkpoint.text_config)
    assign_slots(text_slots(text), checkpoint.text_params, source=f"{checkpoint.path}: the text tower", fix=_FIX)
    logits = ContrastiveLogits(logit_bias=checkpoint.family.logit_bias, name="logits")
    logits.build()
    images, vision_config = image_model_and_config(checkpoint, include_preprocessing=include_preprocessing,
                                                   image_size=image_size, flexible=flexible)
    assign_slots(head_slots(images, logits), checkpoint.head_params, source=f"{checkpoint.path}: the heads",
                 fix=_FIX)
    return ZeroShotModel(images, text, logits, tokenizer, checkpoint.family_name, checkpoint.family.probabilities,
                         patch_size=checkpoint.vision_config.get("patch_size"),
                         include_preprocessing=include_preprocessing, vision_config=vision_config,
                         text_config=checkpoint.text_config, layout=checkpoint.layout)


def _check_tokenizer(tokenizer: Tokenizer, config, path: str) -> None:
    """Refuse a tokenizer that is not the text tower's: ids beyond its embedding table, or (a tower that pools at
    the end-of-text token) texts that never hold the config's `eos_token_id`, which would pool at position 0."""
    files = f"{tokenizer.source!r} (with tokenizer_config.json)"
    if tokenizer.max_id >= config.vocab_size:
        raise ValueError(f"{files} gives ids up to {tokenizer.max_id}, but the text tower's embedding table has "
                         f"{config.vocab_size} rows (text_config.vocab_size); the tokenizer is not this model's. Save "
                         "the model's own tokenizer beside it.")
    if config.pooling == "first_eos":
        ids, _ = tokenizer(["a photo of a cat"])
        if config.eos_token_id not in ids[0]:
            raise ValueError(
                f"{os.path.join(path, 'config.json')!r} says the text tower pools at its end-of-text token "
                f"(text_config.eos_token_id {config.eos_token_id}), but {files} never gives that id (a text becomes "
                f"{ids[0][:8].tolist()} ...): the tokenizer is not this model's, or eos_token_id is wrong. Save the "
                "model's own tokenizer beside it, or correct eos_token_id.")


def from_pretrained(source, *, include_preprocessing: bool = True, image_size=None, flexible: bool = False,
                    revision=None, token=None, cache_dir=None) -> ZeroShotModel:
    """The zero-shot model of a transformers `CLIPModel`, `SiglipModel` or `Siglip2Model` directory (config.json,
    model.safetensors, tokenizer.json, tokenizer_config.json) or its hub id (`hf-hub:ORG/NAME`, `hf://ORG/NAME`).

    `include_preprocessing=True`: images are RGB in [0, 255], normalised in the model with the checkpoint's
    mean/std (its `preprocessor_config.json`, else the family's); False: already normalised. `image_size`: another
    size (position embeddings resampled as `vit_keras.from_pretrained`). `flexible=True` (SigLIP 2): the image
    model takes the NaFlex dict of `patches`, `grid` and `mask`.
    """
    if hub.is_hub_id(source):
        path = hub_files.materialize(source, revision=revision, token=token, cache_dir=cache_dir)
    else:
        if revision is not None or token is not None:
            raise ValueError(f"revision= and token= apply to hub ids (hf-hub:ORG/NAME), not to {source!r}.")
        path = os.fspath(source)
        if not os.path.isdir(path):
            raise ValueError(f"{path!r} is not a directory: pass a transformers save_pretrained directory of a "
                             "CLIPModel, SiglipModel or Siglip2Model, or its hub id (hf-hub:ORG/NAME).")
    checkpoint = read_checkpoint(path)
    config = checkpoint.text_config
    tokenizer = Tokenizer.from_directory(path, context_length=config.context_length, family=checkpoint.family_name,
                                         return_mask=config.use_attention_mask)
    _check_tokenizer(tokenizer, config, path)
    return build(checkpoint, include_preprocessing=include_preprocessing, image_size=image_size, flexible=flexible,
                 tokenizer=tokenizer)
