"""The normaliser and the pre-tokenizer of a tokenizer.json, as TensorFlow string ops over ragged batches."""

from __future__ import annotations

import functools

import tensorflow as tf

from vit_keras.zeroshot.graph_tokenizer.tensors import each, table
from vit_keras.zeroshot.graph_tokenizer.unicode import (
    MATCH,
    NUL,
    SPLIT,
    UnsupportedPipeline,
    escape_members,
    literal,
    nfc_changes_patterns,
    rewrite,
    translate_regex,
)


def _regex(pattern: dict) -> str:
    """A tokenizer.json pattern (`{"String": ...}` or `{"Regex": ...}`) as an RE2 regex."""
    return literal(pattern["String"]) if "String" in pattern else translate_regex(pattern["Regex"])


def lowercase(texts):
    """The library's Lowercase as TensorFlow runs it: Σ first (TensorFlow lowercases whole strings, so a word-final Σ
    would become ς; the library maps each character alone), and NUL through a stand-in (TensorFlow's lowercasing
    ends a string at NUL; the library keeps what follows)."""
    texts = tf.strings.regex_replace(tf.strings.regex_replace(texts, "\u03a3", "\u03c3"), "\\x00", NUL)
    return tf.strings.regex_replace(tf.strings.lower(texts, encoding="utf-8"), NUL, "\x00")


class Normalizer(tf.Module):
    """A tokenizer.json `normalizer` as string ops: `normalizer(texts)`; refuses a part it has no form for."""

    def __init__(self, spec):
        super().__init__()
        self.steps, self.nfc, self.lowercases = [], False, False
        self._add(spec)

    def _add(self, spec):
        if spec is None:
            return
        kind = spec.get("type")
        if kind == "Sequence":
            for part in spec["normalizers"]:
                self._add(part)
        elif kind == "Lowercase":
            self.steps.append(lowercase)
            self.lowercases = True
        elif kind == "NFC":
            self.nfc = True
        elif kind == "Replace":
            regex = _regex(spec["pattern"])
            content = rewrite(spec["content"])
            self.steps.append(lambda text, regex=regex, content=content: tf.strings.regex_replace(text, regex, content))
        elif kind == "Strip":
            space = escape_members("s")  # the library strips what Rust calls whitespace: White_Space, as \\s
            for flag, regex in (("strip_left", f"^[{space}]+"), ("strip_right", f"[{space}]+$")):
                if spec.get(flag, True):
                    self.steps.append(lambda text, regex=regex: tf.strings.regex_replace(text, regex, ""))
        elif kind == "Prepend":
            prepend = spec["prepend"]
            self.steps.append(lambda text, prepend=prepend: tf.where(
                tf.strings.length(text) > 0, tf.strings.join([prepend, text]), text))
        else:
            raise UnsupportedPipeline(f"the normaliser {kind!r}")

    def __call__(self, texts):
        checks = []
        if self.nfc:
            # one pattern at a time: together they outgrow RE2's DFA memory and fall back to a slow matcher
            changes = tf.reduce_any(tf.stack([tf.strings.regex_full_match(texts, f"(?s).*(?:{pattern}).*")
                                              for pattern in nfc_changes_patterns()]), axis=0)
            checks.append(tf.debugging.Assert(
                tf.logical_not(tf.reduce_any(changes)),
                ["A text may change under Unicode NFC normalisation, which this model's tokenizer applies and the "
                 "TensorFlow graph cannot; send unicodedata.normalize('NFC', text) instead. Texts (True = refused):",
                 changes], summarize=64))
        with tf.control_dependencies(checks):
            texts = tf.identity(texts)
        for step in self.steps:
            texts = step(texts)
        return texts


def _split(pieces, regex, behavior, invert):
    """tokenizers' Split on a regex over a ragged batch of pieces; empty pieces dropped."""
    if behavior == "Removed" and invert:
        marked = each(tf.strings.regex_replace, pieces, regex, f"{SPLIT}{MATCH}\\0{SPLIT}")
        parts = tf.strings.split(marked, SPLIT)
        keep = each(tf.strings.regex_full_match, parts, f"(?s){MATCH}.*")
        parts = each(tf.strings.regex_replace, tf.ragged.boolean_mask(parts, keep), MATCH, "")
    elif invert:
        raise UnsupportedPipeline(f"the pre-tokenizer Split with invert=True and behavior {behavior!r}")
    else:
        rewrite = {"Removed": SPLIT, "Isolated": f"{SPLIT}\\0{SPLIT}", "MergedWithPrevious": f"\\0{SPLIT}",
                   "MergedWithNext": f"{SPLIT}\\0"}
        if behavior not in rewrite:
            raise UnsupportedPipeline(f"the pre-tokenizer Split with behavior {behavior!r}")
        parts = tf.strings.split(each(tf.strings.regex_replace, pieces, regex, rewrite[behavior]), SPLIT)
    parts = parts.merge_dims(-2, -1)
    return tf.ragged.boolean_mask(parts, each(tf.strings.length, parts) > 0)


# GPT-2's split as the ByteLevel pre-tokenizer runs it, without `\s+(?!\S)`: RE2 has no lookahead, so a whitespace
# run followed by a non-space is first cut before its last character (`_GPT2_RUN`), which is what that lookahead does.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+"
_GPT2_RUN = r"(\s+)(\s\S)"


@functools.cache
def _byte_symbols():
    """GPT-2's byte → printable character map (the ByteLevel pre-tokenizer's alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    symbols, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return symbols


class PreTokenizer(tf.Module):
    """A tokenizer.json `pre_tokenizer`: `pre_tokenizer(texts)` → ragged (texts, pieces), empty pieces dropped."""

    def __init__(self, spec):
        super().__init__()
        self.steps = []
        self.tables = []
        self._add(spec)

    def _add(self, spec):
        if spec is None:
            return
        kind = spec.get("type")
        if kind == "Sequence":
            for part in spec["pretokenizers"]:
                self._add(part)
        elif kind == "Split":
            regex = _regex(spec["pattern"])
            self.steps.append(lambda pieces, first, regex=regex, spec=spec: _split(
                pieces, regex, spec["behavior"], spec.get("invert", False)))
        elif kind == "Metaspace":
            self.steps.append(self._metaspace(spec))
        elif kind == "ByteLevel":
            self.steps.append(self._byte_level(spec))
        else:
            raise UnsupportedPipeline(f"the pre-tokenizer {kind!r}")

    @staticmethod
    def _metaspace(spec):
        replacement = spec.get("replacement", "\u2581")
        scheme = spec.get("prepend_scheme", "always" if spec.get("add_prefix_space", True) else "never")
        if scheme not in ("always", "first", "never"):
            raise UnsupportedPipeline(f"the Metaspace prepend_scheme {scheme!r}")

        def metaspace(pieces, first):
            pieces = each(tf.strings.regex_replace, pieces, " ", rewrite(replacement))
            if scheme != "never":  # one sequence per text: "first" prepends to the text's first piece only
                starts = each(tf.strings.regex_full_match, pieces, f"(?s){literal(replacement)}.*")
                if scheme == "first":  # only a text's first piece, and only where the text begins
                    later = tf.ragged.range(pieces.row_lengths()) > 0
                    not_first = tf.logical_not(tf.gather(first, pieces.value_rowids()))
                    starts = starts.with_flat_values(starts.flat_values | later.flat_values | not_first)
                prefixed = each(lambda values: tf.strings.join([replacement, values]), pieces)
                pieces = each(tf.where, starts, pieces, prefixed)
            if spec.get("split", True):
                return _split(pieces, literal(replacement), "MergedWithNext", False)
            return pieces

        return metaspace

    def _byte_level(self, spec):
        symbols = _byte_symbols()
        to_symbol = table([bytes([byte]) for byte in range(256)], [symbols[byte] for byte in range(256)], "",
                          value_dtype=tf.string)
        self.tables.append(to_symbol)
        prefix, use_regex = spec.get("add_prefix_space", False), spec.get("use_regex", True)
        gpt2, gpt2_run = translate_regex(_GPT2), translate_regex(_GPT2_RUN)

        def byte_level(pieces, first):
            if prefix:
                needs = tf.logical_not(each(tf.strings.regex_full_match, pieces, "(?s) .*"))
                pieces = each(tf.where, needs, each(lambda values: tf.strings.join([" ", values]), pieces), pieces)
            if use_regex:
                pieces = each(tf.strings.regex_replace, pieces, gpt2_run, f"\\1{SPLIT}\\2")
                pieces = tf.strings.split(pieces, SPLIT).merge_dims(-2, -1)
                pieces = _split(pieces, gpt2, "Removed", True)
            characters = tf.strings.bytes_split(pieces)
            return tf.strings.reduce_join(each(to_symbol.lookup, characters), axis=-1)

        return byte_level

    def __call__(self, texts, first=None):
        """`first`: per text, whether it begins the original text (Metaspace's "first" scheme; default all)."""
        first = tf.ones_like(texts, tf.bool) if first is None else first
        pieces = tf.RaggedTensor.from_tensor(tf.expand_dims(texts, 1))
        pieces = tf.ragged.boolean_mask(pieces, each(tf.strings.length, pieces) > 0)  # the library skips them
        for step in self.steps:
            pieces = step(pieces, first)
        return tf.ragged.boolean_mask(pieces, each(tf.strings.length, pieces) > 0)
