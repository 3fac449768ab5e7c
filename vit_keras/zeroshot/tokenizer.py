"""The tokenizer a checkpoint ships (`tokenizer.json` + `tokenizer_config.json`, as transformers' fast tokenizers
save them), run with the `tokenizers` library and batched as each family's reference expects: every text padded
(right) to the context length (the text tower's `max_position_embeddings`) with the checkpoint's pad token
(CLIP: `<|endoftext|>`, SigLIP: `</s>`, SigLIP 2: `<pad>`), longer texts truncated to it (said once, as a
warning). The ids are transformers' `tokenizer(texts, padding="max_length", max_length=context, truncation=True)`.

Example:
    >>> tokenizer = Tokenizer.from_directory("tests/fixtures/zeroshot/clip/checkpoint", context_length=16)
    >>> ids, mask = tokenizer(["a photo of a cat"])
    >>> ids.shape, int(mask.sum()), int(ids[0, 0]) == tokenizer.token_id("<|startoftext|>")
    ((1, 16), 7, True)
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np

TOKENIZER_NAME = "tokenizer.json"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
# Sentencepiece and BPE vocab files of the slow tokenizers, which the `tokenizers` library cannot read.
SLOW_TOKENIZER_FILES = ("spiece.model", "tokenizer.model", "vocab.json", "merges.txt", "sentencepiece.bpe.model")


def _special(value):
    """A tokenizer_config special token, which transformers writes as a string or an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value


class Tokenizer:
    """A checkpoint's tokenizer: `tokenizer(texts) -> (token_ids, attention_mask)`, int32 NumPy arrays of shape
    (len(texts), context_length); `return_mask=False` (SigLIP, whose reference passes no mask) gives None as the
    mask."""

    def __init__(self, backend, *, context_length: int, pad_token: str, return_mask: bool = True,
                 source: str = "the tokenizer"):
        self.backend = backend
        self.source = source
        self.context_length = int(context_length)
        self.pad_token = pad_token
        self.pad_id = self.token_id(pad_token)
        self.return_mask = bool(return_mask)
        backend.no_padding()
        backend.no_truncation()

    @classmethod
    def from_directory(cls, path: str, *, context_length: int, return_mask: bool = True) -> Tokenizer:
        """The tokenizer saved in `path` (a transformers directory). Refuses a directory without `tokenizer.json`
        (naming the slow tokenizer files it has instead) and a tokenizer without a pad token."""
        from vit_keras.extras import require

        Backend = require("tokenizers", "zeroshot", "Reading a checkpoint's tokenizer (tokenizer.json)").Tokenizer
        file = os.path.join(path, TOKENIZER_NAME)
        if not os.path.isfile(file):
            slow = sorted(name for name in SLOW_TOKENIZER_FILES if os.path.isfile(os.path.join(path, name)))
            why = (f" It has the slow tokenizer's {slow}: load it once with transformers' AutoTokenizer (use_fast) "
                   "and save_pretrained it to write tokenizer.json." if slow else
                   " Save the model's tokenizer beside it (tokenizer.save_pretrained(directory)).")
            raise ValueError(f"{path!r} has no {TOKENIZER_NAME}, the tokenizer its text tower was trained with; "
                             f"zero-shot needs it.{why}")
        config_file = os.path.join(path, TOKENIZER_CONFIG_NAME)
        config = {}
        if os.path.isfile(config_file):
            with open(config_file, encoding="utf-8") as f:
                config = json.load(f)
        pad = _special(config.get("pad_token"))
        backend = Backend.from_file(file)
        if pad is None and backend.padding is not None:
            pad = backend.padding.get("pad_token")
        if pad is None:
            raise ValueError(f"{config_file!r} names no pad_token, so texts cannot be batched as the model expects; "
                             "add the pad token the model was trained with (CLIP: '<|endoftext|>', SigLIP: '</s>', "
                             "SigLIP 2: '<pad>').")
        if config.get("padding_side", "right") != "right":
            raise ValueError(f"{config_file!r}: padding_side {config['padding_side']!r}; the text towers read "
                             "right-padded ids.")
        return cls(backend, context_length=context_length, pad_token=pad, return_mask=return_mask, source=file)

    def token_id(self, token: str) -> int:
        index = self.backend.token_to_id(token)
        if index is None:
            raise ValueError(f"{self.source}: the token {token!r} is not in its "
                             "vocabulary.")
        return int(index)

    @property
    def max_id(self) -> int:
        """The largest id the tokenizer can give (its vocabulary and added tokens)."""
        vocab = self.backend.get_vocab(with_added_tokens=True)
        return max(vocab.values())

    def __call__(self, texts):
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if not texts:
            raise ValueError("tokenize: got no texts; pass a list of strings.")
        bad = [type(text).__name__ for text in texts if not isinstance(text, str)]
        if bad:
            raise ValueError(f"tokenize: texts must be strings, got {sorted(set(bad))}.")
        encodings = self.backend.encode_batch(texts)
        context = self.context_length
        ids = np.full((len(texts), context), self.pad_id, np.int32)
        mask = np.zeros((len(texts), context), np.int32)
        long = []
        for row, text in enumerate(texts):
            encoding = encodings[row]
            if len(encoding.ids) > context:
                long.append(text)
                encoding = self._truncated(text)
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1
        if long:
            warnings.warn(f"{len(long)} text(s) are longer than the model's context of {context} tokens and were "
                          f"truncated (as the reference tokenizer does), e.g. {long[0][:60]!r}.", stacklevel=2)
        return ids, (mask if self.return_mask else None)

    def _truncated(self, text):
        # The library's own truncation keeps the post-processor's special tokens (the end-of-text token last), as
        # transformers' `truncation=True` does.
        self.backend.enable_truncation(self.context_length)
        try:
            return self.backend.encode(text)
        finally:
            self.backend.no_truncation()
