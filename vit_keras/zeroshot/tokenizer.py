"""The tokenizer a checkpoint ships (`tokenizer.json` + `tokenizer_config.json`, as transformers' fast tokenizers
save them), run with the `tokenizers` library and batched as each family's reference expects: every text padded to
the context length (the text tower's `max_position_embeddings`) with the checkpoint's pad token (CLIP:
`<|endoftext|>`, SigLIP: `</s>`, SigLIP 2: `<pad>`), longer texts truncated to it (said once, as a warning). The
ids are transformers' `AutoTokenizer.from_pretrained(directory)(texts, padding="max_length", max_length=context,
truncation=True)`.

transformers 5 does not run a CLIP or SigLIP 2 `tokenizer.json` as it is: `CLIPTokenizer` and `Siglip2Tokenizer`
(which transformers uses for every `siglip2` checkpoint, whatever class its tokenizer_config.json names) and
`GemmaTokenizer` (the fixed-size SigLIP 2 releases, `SiglipModel`s) keep only the file's vocabulary and merges and
rebuild the rest of the pipeline (normaliser, pre-tokenizer, model switches, CLIP's post-processor) as their code
says. `PIPELINES` holds those pipelines as data, so that a file written by another version or library gives
transformers' ids. The Gemma classes keep the file's post-processor (transformers 5.23 does not rebuild it from
tokenizer_config.json's `add_bos_token` / `add_eos_token`). Other fast tokenizers (the generic class) run as saved;
`SiglipTokenizer`, which transformers runs from sentencepiece, is refused.

Example:
    >>> tokenizer = Tokenizer.from_directory("tests/fixtures/zeroshot/clip/checkpoint", context_length=16,
    ...                                      family="clip")
    >>> ids, mask = tokenizer(["a photo of a cat"])
    >>> ids.shape, int(mask.sum()), int(ids[0, 0]) == tokenizer.token_id("<|startoftext|>")
    ((1, 16), 7, True)
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings

import numpy as np

TOKENIZER_NAME = "tokenizer.json"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
# Sentencepiece and BPE vocab files of the slow tokenizers, which the `tokenizers` library cannot read.
SLOW_TOKENIZER_FILES = ("spiece.model", "tokenizer.model", "vocab.json", "merges.txt", "sentencepiece.bpe.model")
# CLIP's split (transformers 5.23 `CLIPTokenizer`): its special tokens, English contractions, letters, single digits,
# runs of other non-space characters.
CLIP_SPLIT = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """How transformers' tokenizer class of a family runs a tokenizer.json: the parts it replaces (tokenizers'
    JSON forms; None keeps the file's), the BPE model's switches, whether the post-processor is CLIP's
    `<|startoftext|> $A <|endoftext|>`, the class's default special tokens and padding side (used when neither
    tokenizer_config.json nor the file's padding names them)."""

    normalizer: dict | None = None
    pre_tokenizer: dict | None = None
    model: dict | None = None
    clip_post_processor: bool = False
    defaults: dict = dataclasses.field(default_factory=dict)
    padding_side: str = "right"


# Gemma's BPE with byte fallback (transformers 5.23 `GemmaTokenizer`); SigLIP 2's lowercases first.
_GEMMA_NORMALIZER = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
_GEMMA = dict(
    pre_tokenizer={"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False},
    model={"type": "BPE", "dropout": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
           "fuse_unk": True, "byte_fallback": True},
    defaults={"unk_token": "<unk>", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    padding_side="left")
# By the transformers class that runs the tokenizer (`tokenizer_class`); any other runs tokenizer.json as saved.
PIPELINES = {
    "CLIPTokenizer": Pipeline(
        normalizer={"type": "Sequence", "normalizers": [
            {"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "}, {"type": "Lowercase"}]},
        pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": CLIP_SPLIT}, "behavior": "Removed", "invert": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
        model={"type": "BPE", "dropout": None, "continuing_subword_prefix": "", "end_of_word_suffix": "</w>",
               "fuse_unk": False, "byte_fallback": False},
        clip_post_processor=True,
        defaults={"unk_token": "<|endoftext|>", "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
                  "pad_token": "<|endoftext|>"}),
    "GemmaTokenizer": Pipeline(normalizer=_GEMMA_NORMALIZER, **_GEMMA),
    "Siglip2Tokenizer": Pipeline(
        normalizer={"type": "Sequence", "normalizers": [{"type": "Lowercase"}, _GEMMA_NORMALIZER]}, **_GEMMA),
}
AS_SAVED = Pipeline()
# transformers uses its own class for these model types whatever tokenizer_config.json names (CLIP's is always
# CLIPTokenizer; every siglip2 checkpoint names GemmaTokenizer, which transformers overrides).
FAMILY_CLASSES = {"clip": "CLIPTokenizer", "siglip2": "Siglip2Tokenizer"}
# Classes transformers runs from a slow (sentencepiece) file with Python-side text canonicalisation: the
# tokenizer.json beside them is not what transformers runs.
SLOW_CLASSES = ("SiglipTokenizer",)


def tokenizer_class(family: str, config: dict) -> str:
    """The transformers class that runs a checkpoint's tokenizer (without `Fast`).

    Example:
        >>> tokenizer_class("siglip2", {"tokenizer_class": "GemmaTokenizerFast"})
        'Siglip2Tokenizer'
        >>> tokenizer_class("siglip", {"tokenizer_class": "GemmaTokenizerFast"})
        'GemmaTokenizer'
    """
    if family in FAMILY_CLASSES:
        return FAMILY_CLASSES[family]
    return str(config.get("tokenizer_class") or "TokenizersBackend").removesuffix("Fast")


def _load_json(file: str):
    """A tokenizer file's JSON, or an error naming the file."""
    try:
        with open(file, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        where = f" ({error.msg} at line {error.lineno}, column {error.colno})" if isinstance(
            error, json.JSONDecodeError) else " (not UTF-8 text)"
        raise ValueError(f"{file!r} is not valid JSON{where}; save the model's tokenizer again "
                         "(tokenizer.save_pretrained(directory)).") from None


def _read_config(path: str) -> dict:
    file = os.path.join(path, TOKENIZER_CONFIG_NAME)
    if not os.path.isfile(file):
        return {}
    config = _load_json(file)
    if not isinstance(config, dict):
        raise ValueError(f"{file!r} is not a JSON object; save the tokenizer again with save_pretrained.")
    return config


def returns_attention_mask(path: str) -> bool:
    """Whether the directory's tokenizer gives an attention mask, which the reference pipeline
    (`model(**tokenizer(texts))`) then passes to the text tower: `model_input_names` of tokenizer_config.json,
    else transformers' default (input ids and the mask). SigLIP's tokenizers list `input_ids` only.

    Example:
        >>> returns_attention_mask("tests/fixtures/zeroshot/siglip/checkpoint")
        False
        >>> returns_attention_mask("tests/fixtures/zeroshot/siglip2/checkpoint")
        True
    """
    names = _read_config(path).get("model_input_names", ["input_ids", "attention_mask"])
    if not isinstance(names, list):
        raise ValueError(f"{os.path.join(path, TOKENIZER_CONFIG_NAME)!r}: model_input_names must be a list, got "
                         f"{names!r}.")
    return "attention_mask" in names


def _special(value):
    """A tokenizer_config special token, which transformers writes as a string or an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def _rebuilt(tokenizer_json: dict, pipeline: Pipeline, unk_token) -> str:
    """The tokenizer.json text with the family's pipeline in place of the file's."""
    out = dict(tokenizer_json)
    out["truncation"] = out["padding"] = None
    for part in ("normalizer", "pre_tokenizer"):
        if getattr(pipeline, part) is not None:
            out[part] = getattr(pipeline, part)
    if pipeline.model is not None:
        model = out.get("model") or {}
        if model.get("type") != pipeline.model["type"]:
            raise ValueError(f"the tokenizer's model is {model.get('type')!r}, not the {pipeline.model['type']} "
                             "this model family's tokenizer uses; save the model's own tokenizer beside it.")
        out["model"] = {**model, **pipeline.model, "unk_token": unk_token}
    return json.dumps(out)


class Tokenizer:
    """A checkpoint's tokenizer: `tokenizer(texts) -> (token_ids, attention_mask)`, int32 NumPy arrays of shape
    (len(texts), context_length), padded on `padding_side`; `return_mask=False` (SigLIP, whose reference passes no
    mask) gives None as the mask."""

    def __init__(self, backend, *, context_length: int, pad_token: str, return_mask: bool = True,
                 source: str = "the tokenizer", padding_side: str = "right"):
        self.backend = backend
        self.padding_side = padding_side
        self.source = source
        self.context_length = int(context_length)
        self.pad_token = pad_token
        self.pad_id = self.token_id(pad_token)
        self.return_mask = bool(return_mask)
        backend.no_padding()
        backend.no_truncation()

    @classmethod
    def from_directory(cls, path: str, *, context_length: int, family: str = "siglip",
                       return_mask: bool = True) -> Tokenizer:
        """The tokenizer saved in `path` (a transformers directory), run as transformers runs it for `family`.
        Refuses a directory without `tokenizer.json` (naming the slow tokenizer files it has instead) and a
        tokenizer without a pad token."""
        from vit_keras.extras import require

        tokenizers = require("tokenizers", "zeroshot", "Reading a checkpoint's tokenizer (tokenizer.json)")
        file = os.path.join(path, TOKENIZER_NAME)
        if not os.path.isfile(file):
            slow = sorted(name for name in SLOW_TOKENIZER_FILES if os.path.isfile(os.path.join(path, name)))
            why = (f" It has a slow tokenizer's {slow}, which vit_keras does not run (transformers runs it with "
                   "sentencepiece); a checkpoint with a fast tokenizer (tokenizer.json) is needed." if slow else
                   " Save the model's tokenizer beside it (tokenizer.save_pretrained(directory)).")
            raise ValueError(f"{path!r} has no {TOKENIZER_NAME}, the tokenizer its text tower was trained with; "
                             f"zero-shot needs it.{why}")
        config_file = os.path.join(path, TOKENIZER_CONFIG_NAME)
        config = _read_config(path)
        name = tokenizer_class(family, config)
        if name in SLOW_CLASSES:
            raise ValueError(f"{config_file!r} names {name}, which transformers runs from its sentencepiece model with "
                             "its own text canonicalisation, not from tokenizer.json; vit_keras reads tokenizer.json "
                             "only and would give other ids. Re-save the tokenizer with a fast class (e.g. set "
                             "tokenizer_class to TokenizersBackend after checking its ids against transformers).")
        pipeline = PIPELINES.get(name, AS_SAVED)
        special = {key: _special(config.get(key, pipeline.defaults.get(key)))
                   for key in ("unk_token", "bos_token", "eos_token", "pad_token")}
        tokenizer_json = _load_json(file)
        if not isinstance(tokenizer_json, dict):
            raise ValueError(f"{file!r} is not a JSON object; save the model's tokenizer again.")
        try:
            backend = tokenizers.Tokenizer.from_str(_rebuilt(tokenizer_json, pipeline, special["unk_token"]))
        except ValueError as error:
            raise ValueError(f"{file!r}: {error}") from None
        # As transformers: the config's pad token and side, else the ones the file's padding names, else the class's.
        padding = tokenizer_json.get("padding") or {}
        pad = _special(config.get("pad_token")) or padding.get("pad_token") or special["pad_token"]
        if pad is None:
            raise ValueError(f"{config_file!r} names no pad_token, so texts cannot be batched as the model expects; "
                             "add the pad token the model was trained with (CLIP: '<|endoftext|>', SigLIP: '</s>', "
                             "SigLIP 2: '<pad>').")
        side = config.get("padding_side") or str(padding.get("direction", pipeline.padding_side)).lower()
        if side not in ("left", "right"):
            raise ValueError(f"{config_file!r}: padding_side {side!r} is neither 'left' nor 'right'.")
        tokenizer = cls(backend, context_length=context_length, pad_token=pad, return_mask=return_mask, source=file,
                        padding_side=side)
        if pipeline.clip_post_processor:
            backend.post_processor = tokenizers.processors.RobertaProcessing(
                (special["eos_token"], tokenizer.token_id(special["eos_token"])),
                (special["bos_token"], tokenizer.token_id(special["bos_token"])), trim_offsets=False,
                add_prefix_space=False)
        return tokenizer

    def token_id(self, token: str) -> int:
        index = self.backend.token_to_id(token)
        if index is None:
            raise ValueError(f"{self.source}: the token {token!r} is not in its vocabulary; its tokenizer_config.json "
                             "and tokenizer.json are not of the same tokenizer.")
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
            place = slice(0, len(encoding.ids)) if self.padding_side == "right" else slice(context - len(encoding.ids),
                                                                                           context)
            ids[row, place] = encoding.ids
            mask[row, place] = 1
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
