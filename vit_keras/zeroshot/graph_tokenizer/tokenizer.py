"""`GraphTokenizer`: a tokenizer.json pipeline compiled into TensorFlow ops (the added tokens cut out, the
normaliser, the pre-tokenizer and the model run, the special tokens put around, padded to the context); the
package's docstring says what it covers and where it refuses."""

from __future__ import annotations

import json

import tensorflow as tf

from vit_keras.zeroshot.graph_tokenizer.bpe_unigram import MODELS
from vit_keras.zeroshot.graph_tokenizer.pipeline import Normalizer, PreTokenizer
from vit_keras.zeroshot.graph_tokenizer.tensors import concat_rows, each, table
from vit_keras.zeroshot.graph_tokenizer.unicode import (
    MATCH,
    RESERVED,
    SPLIT,
    UnsupportedPipeline,
    literal,
)
from vit_keras.zeroshot.graph_tokenizer.unicode_gaps import unshared_ranges

# Characters per text the graph tokenizes at most: many times any context (64-77 tokens, ~4 characters each in
# English), and a bound on a request's cost (BPE over a text Gemma-style tokenizers do not pre-split grows with
# the square of its length: 0.3 s at 2,048 characters, 4.4 s at 8,192 on a 2-core Xeon).
MAX_TEXT_LENGTH = 2048


def _special_tokens(spec, vocab_ids):
    """(prefix ids, suffix ids) the post-processor puts around one sequence."""
    if spec is None:
        return [], []
    kind = spec.get("type")
    if kind == "Sequence":
        found = [_special_tokens(part, vocab_ids) for part in spec["processors"] if part.get("type") != "ByteLevel"]
        if len(found) > 1:
            raise UnsupportedPipeline("a post-processor Sequence with more than one template")
        return found[0] if found else ([], [])
    if kind == "ByteLevel":
        return [], []
    if kind == "TemplateProcessing":
        prefix, suffix, seen = [], [], False
        specials = spec.get("special_tokens", {})
        for item in spec["single"]:
            if "Sequence" in item:
                seen = True
                continue
            token = item["SpecialToken"]["id"]
            ids = specials[token]["ids"] if token in specials else [vocab_ids[token]]
            (suffix if seen else prefix).extend(ids)
        return prefix, suffix
    if kind in ("RobertaProcessing", "BertProcessing"):
        return [spec["cls"][1]], [spec["sep"][1]]
    raise UnsupportedPipeline(f"the post-processor {kind!r}")


def _vocab_ids(spec) -> dict:
    model = spec["model"]
    vocab = model["vocab"]
    ids = {piece: index for index, (piece, _) in enumerate(vocab)} if isinstance(vocab, list) else dict(vocab)
    for added in spec.get("added_tokens") or []:
        ids[added["content"]] = added["id"]
    return ids


class AddedTokens(tf.Module):
    """The tokenizer's added tokens (special tokens and the like), which the library cuts out of a text before
    anything else runs on it: those matched on the raw text (`normalized: false`) before the normaliser, the others
    on its output (their own text normalised the same way), each leftmost and longest first. Tokens with lstrip,
    rstrip or single_word set are not cut here: a text holding one is refused."""

    def __init__(self, added: list, normalizer):
        super().__init__()
        plain = [token for token in added if not (token.get("lstrip") or token.get("rstrip")
                                                   or token.get("single_word"))]
        self.flagged = [token["content"] for token in added if token not in plain]
        raw = {token["content"]: token["id"] for token in plain if not token.get("normalized", False)}
        normalized = {}
        for token in plain:
            if token.get("normalized", False):
                normalized[normalizer(tf.constant([token["content"]])).numpy()[0].decode()] = token["id"]
        self.raw_regex, self.normalized_regex = _alternation(raw), _alternation(normalized)
        contents = {**raw, **normalized}
        self.ids = table(list(contents) or [""], list(contents.values()) or [-1], -1)

    def check(self, texts):
        if not self.flagged:
            return []
        holds = tf.strings.regex_full_match(texts, f"(?s).*(?:{_alternation_of(self.flagged)}).*")
        return [tf.debugging.Assert(tf.logical_not(tf.reduce_any(holds)), [
            f"A text holds one of the added tokens {self.flagged[:5]}, which this tokenizer matches with rules "
            "(lstrip, rstrip, single_word) the TensorFlow graph does not run; remove it from the text. Texts (True = "
            "refused):", holds], summarize=64)]

    def split(self, texts, first, regex):
        """Cut `texts` (1-D) at the added tokens of `regex`: `(segments, owner, ids, first)`, flat: each segment's
        text ("" for an added token), the index of the text it came from, its added token's id (-1: text) and
        whether it begins its original text. Empty text segments are dropped."""
        if regex is None:
            return texts, tf.range(tf.shape(texts)[0], dtype=tf.int64), -tf.ones_like(texts, tf.int32), first
        parts = tf.strings.split(tf.strings.regex_replace(texts, regex, f"{SPLIT}{MATCH}\\0{SPLIT}"), SPLIT)
        parts = tf.ragged.boolean_mask(parts, each(tf.strings.length, parts) > 0)
        index = tf.ragged.range(parts.row_lengths()).flat_values
        owner = parts.value_rowids()
        segments = parts.flat_values
        added = tf.strings.regex_full_match(segments, f"(?s){MATCH}.*")
        ids = tf.where(added, self.ids.lookup(tf.strings.regex_replace(segments, MATCH, "")), -1)
        begins = tf.logical_and(tf.gather(first, owner), tf.equal(index, 0))
        return tf.where(added, "", segments), owner, ids, tf.logical_and(begins, tf.logical_not(added))


def _code_point_names(points):
    """Code points (int32) as "U+XXXX" strings (not the characters: the error prints strings as escaped bytes)."""
    shifts = tf.constant([20, 16, 12, 8, 4, 0])
    nibbles = tf.bitwise.bitwise_and(tf.bitwise.right_shift(tf.expand_dims(points, 1), shifts), 15)
    digits = tf.strings.reduce_join(tf.gather(tf.constant(list("0123456789ABCDEF")), nibbles), axis=1)
    width = 4 + tf.cast(points > 0xFFFF, tf.int32) + tf.cast(points > 0xFFFFF, tf.int32)
    return tf.strings.join(["U+", tf.strings.substr(digits, 6 - width, width)])


def _as_rows(ids):
    """Ids (-1: none) as ragged rows of one id or none."""
    rows = tf.range(tf.shape(ids, out_type=tf.int64)[0])
    return tf.RaggedTensor.from_value_rowids(ids[ids >= 0], rows[ids >= 0], nrows=tf.shape(ids, out_type=tf.int64)[0])


def _alternation_of(contents) -> str | None:
    # longest first: RE2 takes the first alternative that matches at the leftmost position
    return "|".join(literal(content) for content in sorted(contents, key=len, reverse=True)) or None


def _alternation(contents: dict) -> str | None:
    return _alternation_of(list(contents))


class GraphTokenizer(tf.Module):
    """`graph_tokenizer(texts)`: texts string (batch,) → `(token_ids, attention_mask)` int32 (batch, context_length),
    as `Tokenizer.__call__` gives them (truncated to the context with the special tokens kept, padded with the pad
    token on the tokenizer's side)."""

    def __init__(self, spec: dict, *, context_length: int, pad_id: int, padding_side: str = "right",
                 source: str = "the tokenizer", max_text_length: int = MAX_TEXT_LENGTH):
        super().__init__(name="graph_tokenizer")
        try:
            model_spec = spec["model"]
            kind = model_spec.get("type")
            if kind not in MODELS:
                raise UnsupportedPipeline(f"the model {kind!r}")
            self._normalizer = Normalizer(spec.get("normalizer"))
            self._pre_tokenizer = PreTokenizer(spec.get("pre_tokenizer"))
            self._model = MODELS[kind](model_spec)
            self.prefix, self.suffix = _special_tokens(spec.get("post_processor"), _vocab_ids(spec))
            self._added = AddedTokens(spec.get("added_tokens") or [], self._normalizer)
        except UnsupportedPipeline as error:
            raise UnsupportedPipeline(f"{source}: {error} has no TensorFlow form in vit_keras, so this tokenizer "
                                      "cannot run inside a SavedModel; export with strings=False (the client "
                                      "tokenizes with ZeroShotModel.tokenize) or with class_names.") from None
        self.context_length, self.pad_id = int(context_length), int(pad_id)
        self.max_text_length = int(max_text_length)
        if self.max_text_length < 1:
            raise ValueError(f"max_text_length must be a positive number of characters, got {max_text_length!r}.")
        if padding_side not in ("left", "right"):
            raise ValueError(f"{source}: padding_side {padding_side!r} is neither 'left' nor 'right'.")
        self.padding_side = padding_side
        ranges = unshared_ranges(lowercase=self._normalizer.lowercases, nfc=self._normalizer.nfc)
        self.unshared = ranges  # the code points refused in a text (see unicode_gaps)
        self._unshared_firsts = tf.constant([first for first, _ in ranges] or [-1], tf.int32)
        self._unshared_lasts = tf.constant([last for _, last in ranges] or [-1], tf.int32)
        if len(self.prefix) + len(self.suffix) >= self.context_length:
            raise ValueError(f"{source}: the context of {self.context_length} tokens has no room for text after the "
                             f"{len(self.prefix) + len(self.suffix)} special tokens.")

    @classmethod
    def from_tokenizer(cls, tokenizer, max_text_length: int = MAX_TEXT_LENGTH) -> GraphTokenizer:
        """The graph form of a `vit_keras.zeroshot.tokenizer.Tokenizer`."""
        spec = json.loads(tokenizer.backend.to_str())
        return cls(spec, context_length=tokenizer.context_length, pad_id=tokenizer.pad_id,
                   padding_side=tokenizer.padding_side, source=tokenizer.source, max_text_length=max_text_length)

    def __call__(self, texts):
        texts = tf.convert_to_tensor(texts, tf.string)
        marked = tf.strings.regex_full_match(texts, f"(?s).*[{''.join(RESERVED)}].*")
        long = tf.strings.length(texts, unit="UTF8_CHAR") > self.max_text_length
        points = tf.strings.unicode_decode(texts, "UTF-8", errors="replace")  # invalid bytes become U+FFFD
        valid = tf.equal(tf.strings.unicode_encode(points, "UTF-8"), texts)
        checks = [tf.debugging.Assert(tf.reduce_all(valid), [
            "A text is not valid UTF-8, so it has no characters to tokenize; send text encoded as UTF-8. Texts "
            "(False = refused):", valid], summarize=64),
                  tf.debugging.Assert(tf.logical_not(tf.reduce_any(marked)), [
            "A text holds one of the Unicode noncharacters U+FDD0 to U+FDD2, which the tokenizer graph reserves; "
            "remove it. Texts (True = refused):", marked], summarize=64),
                  tf.debugging.Assert(tf.logical_not(tf.reduce_any(long)), [
            f"A text is longer than {self.max_text_length} characters, the limit this tokenizer graph was exported "
            f"with (the model reads only its first {self.context_length} tokens); shorten it, or export with a "
            "larger max_text_length. Texts (True = refused):", long], summarize=64)]
        if self.unshared:
            flat = points.flat_values
            at = tf.searchsorted(self._unshared_firsts, flat, side="right") - 1
            unshared = tf.logical_and(at >= 0, flat <= tf.gather(self._unshared_lasts, tf.maximum(at, 0)))
            checks.append(tf.debugging.Assert(tf.logical_not(tf.reduce_any(unshared)), [
                "A text holds a character whose Unicode data (its lowercase, or whether Unicode NFC changes it) the "
                "tokenizers library has from a newer Unicode version than this TensorFlow graph, which would give "
                "other token ids than the library; remove it, or export with strings=False (the client tokenizes "
                "with ZeroShotModel.tokenize). Code points:", _code_point_names(tf.boolean_mask(flat, unshared))],
                summarize=16))
        with tf.control_dependencies(checks + self._added.check(texts)):
            texts = tf.identity(texts)
        ids = self._encode(texts)
        room = self.context_length - len(self.prefix) - len(self.suffix)
        ids = ids[:, :room]  # as the library truncates: the text's tokens, the special tokens kept
        count = ids.nrows()
        prefix = tf.tile(tf.constant([self.prefix], tf.int32), [count, 1])
        suffix = tf.tile(tf.constant([self.suffix], tf.int32), [count, 1])
        ids = concat_rows(prefix, ids, suffix)
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        dense = ids.to_tensor(default_value=self.pad_id, shape=[None, self.context_length])
        column = tf.range(self.context_length)
        if self.padding_side == "left":
            source = column[None, :] - tf.expand_dims(self.context_length - lengths, 1)
            dense = tf.where(source >= 0, tf.gather(dense, tf.maximum(source, 0), batch_dims=1), self.pad_id)
            mask = source >= 0
        else:
            mask = column[None, :] < tf.expand_dims(lengths, 1)
        return dense, tf.cast(mask, tf.int32)

    def _encode(self, texts):
        """Ragged (texts, ids) before the special tokens: added tokens cut out, the rest normalised,
        pre-tokenized and run through the model, then put back in order."""
        count = tf.shape(texts)[0]
        first = tf.ones([count], tf.bool)
        raw, raw_owner, raw_ids, raw_first = self._added.split(texts, first, self._added.raw_regex)
        normalized = self._normalizer(raw)
        pieces_text, owner, added_ids, first = self._added.split(normalized, raw_first, self._added.normalized_regex)
        pieces = self._pre_tokenizer(pieces_text, first)
        ids = pieces.with_values(tf.cast(self._model(pieces.values), tf.int32)).merge_dims(1, 2)
        ids = concat_rows(ids, _as_rows(added_ids))  # a segment is text or an added token, never both
        ids = tf.RaggedTensor.from_value_rowids(ids, owner, nrows=tf.shape(raw, out_type=tf.int64)[0]).merge_dims(1, 2)
        ids = concat_rows(ids, _as_rows(raw_ids))
        return tf.RaggedTensor.from_value_rowids(ids, raw_owner, nrows=tf.cast(count, tf.int64)).merge_dims(1, 2)
