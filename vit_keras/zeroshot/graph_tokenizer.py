"""The checkpoint's tokenizer as TensorFlow ops, so that a SavedModel takes strings (TF Serving, `tf.data`).

`GraphTokenizer.from_tokenizer(tokenizer)` compiles the pipeline `Tokenizer` runs (the `tokenizers` pipeline it
built, serialised: normaliser, pre-tokenizer, BPE or Unigram model, post-processor, the padding and truncation of
`Tokenizer.__call__`) into core TensorFlow ops only (`tf.strings`, hash tables, while loops): no custom op library,
so a TensorFlow process without vit_keras, and TF Serving, run it. `graph_tokenizer(texts)` gives the same
`(token_ids, attention_mask)` as `tokenizer(texts)`, int32 (texts, context_length).

What it covers: the normalisers Sequence, Lowercase, NFC, Replace, Strip, Prepend; the pre-tokenizers Sequence,
Split, Metaspace, ByteLevel; BPE (merges, end-of-word suffix, byte fallback, unknown-token fusing, ignore_merges)
and Unigram (Viterbi with the library's unknown-token penalty and tie order); TemplateProcessing, Roberta and Bert
post-processors. That is every pipeline CLIP, SigLIP 2 and Gemma-style SigLIP tokenizers run. Anything else is
refused when the graph is built, naming the part.

Where core TensorFlow differs from the `tokenizers` library, it says so instead of answering differently:
- Unicode NFC (CLIP): TensorFlow has no normaliser. Text that NFC leaves unchanged (what keyboards, browsers and
  almost all text sources produce) gives the library's ids; a text that NFC could change (decomposed accents,
  characters NFC replaces, combining marks out of canonical order) fails the call with an error that says to send
  `unicodedata.normalize("NFC", text)`. The check is conservative: a rare NFC text can be refused, none is answered
  wrongly.
- Regular expressions: `tokenizers`' Oniguruma patterns run as RE2 with `\\w`, `\\s`, `\\d` translated to their
  Unicode classes; lookaround and backreferences are refused when the graph is built.
- A special token's literal text inside a text (`"<|endoftext|>"`) is tokenised as text; the library matches it
  as the special token.

Example:
    >>> from vit_keras.zeroshot.tokenizer import Tokenizer
    >>> tokenizer = Tokenizer.from_directory("tests/fixtures/zeroshot/clip/checkpoint", context_length=16,
    ...                                      family="clip")
    >>> graph = GraphTokenizer.from_tokenizer(tokenizer)
    >>> ids, mask = graph(tf.constant(["a photo of a cat"]))
    >>> bool((ids.numpy() == tokenizer(["a photo of a cat"])[0]).all())
    True
"""

from __future__ import annotations

import functools
import json
import sys
import unicodedata

import numpy as np
import tensorflow as tf

# Oniguruma's Unicode escapes (the tokenizers library's regex engine); their members are read from the installed
# library (`escape_members`), since its Unicode tables and class definitions differ from RE2's named classes.
ESCAPES = "wsd"
# Markers put around regex matches to split on them: Unicode noncharacters, which no text should carry (a text
# that does fails the call rather than being split on them).
_SPLIT, _MATCH = "\ufdd0", "\ufdd1"
_MERGE_SEPARATOR = "\x00"
_NO_MERGE = np.iinfo(np.int32).max
# Characters per text the graph tokenizes at most: many times any context (64-77 tokens, ~4 characters each in
# English), and a bound on a request's cost (BPE over a text Gemma-style tokenizers do not pre-split grows with
# the square of its length: 0.3 s at 2,048 characters, 4.4 s at 8,192 on a 2-core Xeon).
MAX_TEXT_LENGTH = 2048
UNIGRAM_UNK_PENALTY = 10.0  # tokenizers' Unigram: the unknown token scores the vocabulary's lowest minus this


class UnsupportedPipeline(ValueError):
    """A tokenizer part with no TensorFlow form here."""


@functools.cache
def escape_members(escape: str, in_class: bool = False) -> str:
    """The characters the tokenizers library's `\\<escape>` (w, s or d) matches, alone or inside a bracketed class
    (which differ there: `[\\w]` leaves out some numbers `\\w` takes), as RE2 class members (`\\x{..}` ranges),
    read from the library itself: one split of a text holding every code point."""
    from vit_keras.extras import require

    library = require("tokenizers", "zeroshot", "Building a tokenizer's TensorFlow form")
    points = [point for point in range(sys.maxunicode + 1) if not 0xD800 <= point <= 0xDFFF]
    pattern = f"[\\{escape}]" if in_class else f"\\{escape}"
    split = library.pre_tokenizers.Split(library.Regex(pattern), "removed")
    outside = {ord(char) for piece, _ in split.pre_tokenize_str("".join(map(chr, points))) for char in piece}
    return _char_class(point for point in points if point not in outside)[1:-1]


def translate_regex(pattern: str) -> str:
    """An Oniguruma pattern (as the tokenizers library runs it) in RE2 syntax, with the same matches.

    Example:
        >>> translate_regex(r"a\\d+").startswith(r"a[\\x{30}-\\x{39}")  # \\d: the library's digits, ASCII first
        True
    """
    out, i, in_class = [], 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            escape = pattern[i + 1]
            if escape in ESCAPES:
                members = escape_members(escape, in_class)
                out.append(members if in_class else f"[{members}]")
            elif escape.lower() in ESCAPES and escape.isupper():
                if in_class:
                    raise UnsupportedPipeline(f"the pattern {pattern!r} negates \\{escape} inside a class, which has "
                                              "no RE2 form with Unicode classes.")
                out.append(f"[^{escape_members(escape.lower())}]")
            elif escape.isdigit() and escape != "0":
                raise UnsupportedPipeline(f"the pattern {pattern!r} has a backreference, which RE2 does not run.")
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if char == "[" and not in_class:
            in_class = True
        elif char == "]" and in_class and pattern[i - 1] != "[" and pattern[i - 2:i] != "[^":
            in_class = False
        elif char == "(" and not in_class and pattern[i + 1:i + 2] == "?" and pattern[i + 2:i + 3] in "=!<>":
            raise UnsupportedPipeline(f"the pattern {pattern!r} has lookaround or an atomic group, which RE2 does "
                                      "not run.")
        out.append(char)
        i += 1
    return "".join(out)


def _literal(text: str) -> str:
    """`text` as an RE2 pattern matching it literally."""
    return "".join(f"\\x{{{ord(char):X}}}" for char in text)


def _rewrite(text: str) -> str:
    """`text` as an RE2 rewrite string (backslashes escaped)."""
    return text.replace("\\", "\\\\")


def _char_class(codepoints) -> str:
    ranges, start, previous = [], None, None
    for point in sorted(codepoints):
        if start is None:
            start = previous = point
        elif point == previous + 1:
            previous = point
        else:
            ranges.append((start, previous))
            start = previous = point
    if start is not None:
        ranges.append((start, previous))
    return "[" + "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges) + "]"


@functools.cache
def nfc_changes_patterns() -> tuple:
    """RE2 patterns, one of which matches wherever NFC could change a text (Python's Unicode tables): a character NFC
    replaces, a mark that composes with a character before it (through other marks), two marks out of canonical
    order. Text it does not match is its own NFC form."""
    replaced, marks_by_class, composable = set(), {}, {}
    for point in range(sys.maxunicode + 1):
        char = chr(point)
        if 0xD800 <= point <= 0xDFFF:
            continue
        combining = unicodedata.combining(char)
        if combining:
            marks_by_class.setdefault(combining, set()).add(point)
        if unicodedata.normalize("NFC", char) != char:
            replaced.add(point)
        decomposed = unicodedata.normalize("NFD", char)
        if len(decomposed) >= 2 and unicodedata.normalize("NFC", decomposed) == char:
            # char is a composite: its last piece composes with what precedes it, and char itself can take more
            second = decomposed[-1]
            firsts = composable.setdefault(ord(second), set())
            firsts.update((ord(unicodedata.normalize("NFC", decomposed[:-1])[-1]), ord(decomposed[0])))
    for lead in range(0x1100, 0x1113):  # Hangul: leading + vowel jamo, and LV syllable + trailing jamo
        for vowel in range(0x1161, 0x1176):
            composable.setdefault(vowel, set()).add(lead)
    for syllable in range(0xAC00, 0xD7A4, 28):
        for trailing in range(0x11A8, 0x11C3):
            composable.setdefault(trailing, set()).add(syllable)
    all_marks = _char_class(set().union(*marks_by_class.values()))
    by_firsts = {}  # the composing marks grouped by the characters they compose with
    for second, firsts in composable.items():
        by_firsts.setdefault(frozenset(firsts), set()).add(second)
    parts = [_char_class(replaced)]
    parts += [f"{_char_class(firsts)}{all_marks}*{_char_class(seconds)}" for firsts, seconds in by_firsts.items()]
    classes = sorted(marks_by_class)
    for index, combining in enumerate(classes[1:], start=1):
        lower = set().union(*(marks_by_class[c] for c in classes[:index]))
        parts.append(f"{_char_class(marks_by_class[combining])}{_char_class(lower)}")
    return tuple(parts)


def _table(keys, values, default, key_dtype=tf.string, value_dtype=tf.int32):
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(keys, key_dtype), tf.constant(values, value_dtype)),
        default_value=default)


def _each(function, ragged, *args):
    """`function` on the values of a ragged tensor (same structure out)."""
    return tf.ragged.map_flat_values(function, ragged, *args)


def _concat_rows(*parts):
    """Concatenate ragged (or dense) rows of the same batch along the second axis."""
    return tf.concat([part if isinstance(part, tf.RaggedTensor) else tf.RaggedTensor.from_tensor(part)
                      for part in parts], axis=1)


class _Normalizer(tf.Module):
    def __init__(self, spec):
        super().__init__()
        self.steps, self.nfc = [], False
        self._add(spec)

    def _add(self, spec):
        if spec is None:
            return
        kind = spec.get("type")
        if kind == "Sequence":
            for part in spec["normalizers"]:
                self._add(part)
        elif kind == "Lowercase":
            # Σ first: TensorFlow lowercases whole strings (a word-final Σ becomes ς), the library each character
            self.steps.append(lambda text: tf.strings.lower(tf.strings.regex_replace(text, "\u03a3", "\u03c3"),
                                                            encoding="utf-8"))
        elif kind == "NFC":
            self.nfc = True
        elif kind == "Replace":
            pattern = spec["pattern"]
            regex = _literal(pattern["String"]) if "String" in pattern else translate_regex(pattern["Regex"])
            content = _rewrite(spec["content"])
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
        marked = _each(tf.strings.regex_replace, pieces, regex, f"{_SPLIT}{_MATCH}\\0{_SPLIT}")
        parts = tf.strings.split(marked, _SPLIT)
        keep = _each(tf.strings.regex_full_match, parts, f"(?s){_MATCH}.*")
        parts = _each(tf.strings.regex_replace, tf.ragged.boolean_mask(parts, keep), _MATCH, "")
    elif invert:
        raise UnsupportedPipeline(f"the pre-tokenizer Split with invert=True and behavior {behavior!r}")
    else:
        rewrite = {"Removed": _SPLIT, "Isolated": f"{_SPLIT}\\0{_SPLIT}", "MergedWithPrevious": f"\\0{_SPLIT}",
                   "MergedWithNext": f"{_SPLIT}\\0"}
        if behavior not in rewrite:
            raise UnsupportedPipeline(f"the pre-tokenizer Split with behavior {behavior!r}")
        parts = tf.strings.split(_each(tf.strings.regex_replace, pieces, regex, rewrite[behavior]), _SPLIT)
    parts = parts.merge_dims(-2, -1)
    return tf.ragged.boolean_mask(parts, _each(tf.strings.length, parts) > 0)


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


class _PreTokenizer(tf.Module):
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
            pattern = spec["pattern"]
            regex = _literal(pattern["String"]) if "String" in pattern else translate_regex(pattern["Regex"])
            self.steps.append(lambda pieces, regex=regex, spec=spec: _split(pieces, regex, spec["behavior"],
                                                                         spec.get("invert", False)))
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

        def metaspace(pieces):
            pieces = _each(tf.strings.regex_replace, pieces, " ", _rewrite(replacement))
            if scheme != "never":  # one sequence per text: "first" prepends to the text's first piece only
                starts = _each(tf.strings.regex_full_match, pieces, f"(?s){_literal(replacement)}.*")
                if scheme == "first":
                    starts = tf.logical_or(starts, tf.ragged.range(pieces.row_lengths()) > 0)
                prefixed = _each(lambda values: tf.strings.join([replacement, values]), pieces)
                pieces = _each(tf.where, starts, pieces, prefixed)
            if spec.get("split", True):
                return _split(pieces, _literal(replacement), "MergedWithNext", False)
            return pieces

        return metaspace

    def _byte_level(self, spec):
        symbols = _byte_symbols()
        table = _table([bytes([byte]) for byte in range(256)], [symbols[byte] for byte in range(256)],
                       "", value_dtype=tf.string)
        self.tables.append(table)
        prefix, use_regex = spec.get("add_prefix_space", False), spec.get("use_regex", True)
        gpt2, gpt2_run = translate_regex(_GPT2), translate_regex(_GPT2_RUN)

        def byte_level(pieces):
            if prefix:
                needs = tf.logical_not(_each(tf.strings.regex_full_match, pieces, "(?s) .*"))
                pieces = _each(tf.where, needs, _each(lambda values: tf.strings.join([" ", values]), pieces), pieces)
            if use_regex:
                pieces = _each(tf.strings.regex_replace, pieces, gpt2_run, f"\\1{_SPLIT}\\2")
                pieces = tf.strings.split(pieces, _SPLIT).merge_dims(-2, -1)
                pieces = _split(pieces, gpt2, "Removed", True)
            characters = tf.strings.bytes_split(pieces)
            return tf.strings.reduce_join(_each(table.lookup, characters), axis=-1)

        return byte_level

    def __call__(self, texts):
        pieces = tf.RaggedTensor.from_tensor(tf.expand_dims(texts, 1))
        pieces = tf.ragged.boolean_mask(pieces, _each(tf.strings.length, pieces) > 0)  # the library skips them
        for step in self.steps:
            pieces = step(pieces)
        return tf.ragged.boolean_mask(pieces, _each(tf.strings.length, pieces) > 0)


class _Vocabulary(tf.Module):
    """Token → id, the byte-fallback tokens, and the expansion of the final tokens into ids."""

    def __init__(self, vocab: dict, unk_id, byte_fallback: bool, fuse_unk: bool, source):
        super().__init__()
        self.size = max(vocab.values()) + 1
        self.ids = _table(list(vocab), list(vocab.values()), -1)
        self.unk_id, self.byte_fallback, self.fuse_unk = unk_id, byte_fallback, fuse_unk
        self.bytes = None
        if byte_fallback:
            names = [f"<0x{byte:02X}>" for byte in range(256)]
            missing = [name for name in names if name not in vocab]
            if missing:
                raise UnsupportedPipeline(f"byte fallback without the byte tokens {missing[:3]} in the vocabulary")
            self.bytes = _table([bytes([byte]) for byte in range(256)], [vocab[name] for name in names], -1)

    def expand(self, tokens, ids):
        """`tokens` ragged [words, tokens] (strings) and their ids (-1: unknown) → ragged [words, ids]: unknown
        tokens as their bytes' tokens (byte fallback) or the unknown token, consecutive unknowns fused."""
        unknown = ids < 0
        if self.byte_fallback:
            characters = tf.strings.bytes_split(tokens.flat_values)  # [tokens, bytes]
            owner = characters.value_rowids()
            token_unknown = tf.gather(unknown.flat_values, owner)
            first = tf.ragged.range(characters.row_lengths()).flat_values == 0
            values = tf.where(token_unknown, self.bytes.lookup(characters.flat_values),
                              tf.gather(ids.flat_values, owner))
            per_token = tf.ragged.boolean_mask(characters.with_flat_values(values),
                                               characters.with_flat_values(tf.logical_or(token_unknown, first)))
            return tokens.with_flat_values(per_token).merge_dims(-2, -1)
        if self.unk_id is None:  # the library drops what it cannot name
            return tf.ragged.boolean_mask(ids, tf.logical_not(unknown))
        if self.fuse_unk:
            previous = tf.concat([tf.zeros_like(unknown[:, :1]), unknown[:, :-1]], axis=1)
            keep = tf.logical_not(tf.logical_and(unknown, previous))
            ids, unknown = tf.ragged.boolean_mask(ids, keep), tf.ragged.boolean_mask(unknown, keep)
        return _each(lambda flags, values: tf.where(flags, tf.cast(self.unk_id, values.dtype), values), unknown, ids)


class _BPE(tf.Module):
    def __init__(self, spec, source):
        super().__init__()
        vocab = spec["vocab"]
        unk = spec.get("unk_token")
        if spec.get("dropout"):
            raise UnsupportedPipeline("BPE dropout")
        if spec.get("continuing_subword_prefix"):
            raise UnsupportedPipeline("a BPE continuing_subword_prefix")
        self.suffix = spec.get("end_of_word_suffix") or ""
        self.ignore_merges = bool(spec.get("ignore_merges", False))
        if self.ignore_merges and self.suffix:
            raise UnsupportedPipeline("BPE ignore_merges with an end_of_word_suffix")
        self.vocabulary = _Vocabulary(vocab, vocab.get(unk) if unk is not None else None,
                                      bool(spec.get("byte_fallback", False)), bool(spec.get("fuse_unk", False)),
                                      source)
        merges = [merge.split(" ", 1) if isinstance(merge, str) else merge for merge in spec["merges"]]
        keys = [f"{left}{_MERGE_SEPARATOR}{right}" for left, right in merges]
        # the first of two identical merges wins, as in the library
        ranks = {}
        for rank, key in enumerate(keys):
            ranks.setdefault(key, rank)
        self.ranks = _table(list(ranks), list(ranks.values()), _NO_MERGE)

    def __call__(self, words):
        characters = tf.strings.unicode_split(words, "UTF-8")
        if self.suffix:
            last = characters.row_limits() - 1
            values = tf.tensor_scatter_nd_update(
                characters.values, tf.expand_dims(last, 1),
                tf.strings.join([tf.gather(characters.values, last), self.suffix]))
            characters = characters.with_values(values)
        tokens, lengths = characters.to_tensor(""), tf.cast(characters.row_lengths(), tf.int32)
        if self.ignore_merges:
            whole = self.vocabulary.ids.lookup(words) >= 0
            column = tf.range(tf.shape(tokens)[1])
            tokens = tf.where(tf.logical_and(tf.expand_dims(whole, 1), column == 0), tf.expand_dims(words, 1), tokens)
            lengths = tf.where(whole, 1, lengths)
        tokens, lengths = self._merge(tokens, lengths)
        tokens = tf.RaggedTensor.from_tensor(tokens, lengths=lengths)
        return self.vocabulary.expand(tokens, _each(self.vocabulary.ids.lookup, tokens))

    def _merge(self, tokens, lengths):
        """Merge the lowest-ranked pair of each word, the leftmost first, until no pair is a merge (the order of the
        library's priority queue)."""
        width = tf.shape(tokens)[1]
        column = tf.range(width)

        def step(tokens, lengths, _):
            pairs = tf.strings.join([tokens[:, :-1], tokens[:, 1:]], separator=_MERGE_SEPARATOR)
            valid = column[:-1][None, :] < tf.expand_dims(lengths - 1, 1)
            ranks = tf.where(valid, self.ranks.lookup(pairs), _NO_MERGE)
            best = tf.reduce_min(tf.concat([ranks, tf.fill([tf.shape(ranks)[0], 1], _NO_MERGE)], 1), axis=1)
            merging = best < _NO_MERGE
            at = tf.reduce_min(tf.where(ranks == tf.expand_dims(best, 1), column[:-1][None, :], width), axis=1)
            at = tf.minimum(at, tf.maximum(width - 2, 0))
            merged = tf.strings.join([tf.gather(tokens, at, batch_dims=1),
                                      tf.gather(tokens, tf.minimum(at + 1, width - 1), batch_dims=1)])
            source = tf.minimum(tf.where(column[None, :] > tf.expand_dims(at, 1), column + 1, column), width - 1)
            shifted = tf.gather(tokens, source, batch_dims=1)
            shifted = tf.where(column[None, :] == tf.expand_dims(at, 1), tf.expand_dims(merged, 1), shifted)
            tokens = tf.where(tf.expand_dims(merging, 1), shifted, tokens)
            return tokens, lengths - tf.cast(merging, tf.int32), tf.reduce_any(merging)

        tokens, lengths, _ = tf.while_loop(lambda tokens, lengths, again: again, step,
                                           (tokens, lengths, tf.constant(True)))
        return tokens, lengths


class _Unigram(tf.Module):
    def __init__(self, spec, source):
        super().__init__()
        vocab = spec["vocab"]
        pieces = {piece: index for index, (piece, _) in enumerate(vocab)}
        unk_id = spec.get("unk_id")
        self.vocabulary = _Vocabulary(pieces, unk_id, bool(spec.get("byte_fallback", False)), True, source)
        scores = np.array([score for _, score in vocab], np.float64)
        self.scores = tf.constant(scores)
        self.unk_score = float(scores.min()) - UNIGRAM_UNK_PENALTY
        self.max_length = max(len(piece) for piece, _ in vocab)

    def __call__(self, words):
        characters = tf.strings.unicode_split(words, "UTF-8")
        lengths = tf.cast(characters.row_lengths(), tf.int32)
        width = tf.shape(characters.to_tensor(""))[1]
        dense = tf.pad(characters.to_tensor(""), [[0, 0], [0, self.max_length]])
        starts = tf.range(width)
        # pieces[w, s, l - 1]: the l characters at s; ids: its id (-1: none); scores: its score, or the unknown
        # token's for a single character the vocabulary lacks
        pieces, ids, scores, piece = [], [], [], None
        for length in range(1, self.max_length + 1):
            following = dense[:, length - 1:length - 1 + width]
            piece = following if piece is None else tf.strings.join([piece, following])
            fits = tf.expand_dims(starts, 0) + length <= tf.expand_dims(lengths, 1)
            piece_ids = tf.where(fits, self.vocabulary.ids.lookup(piece), -1)
            score = tf.where(piece_ids >= 0, tf.gather(self.scores, tf.maximum(piece_ids, 0)),
                             tf.constant(-np.inf, tf.float64))
            if length == 1:
                score = tf.where(tf.logical_and(fits, piece_ids < 0), tf.constant(self.unk_score, tf.float64), score)
            pieces.append(piece)
            ids.append(piece_ids)
            scores.append(score)
        back = self._viterbi(tf.stack(scores, axis=2), width)
        return self._pieces(tf.stack(pieces, axis=2), tf.stack(ids, axis=2), back, lengths, width)

    def _viterbi(self, scores, width):
        """back[w, e]: the length of the best path's last piece ending at e. Ties go to the piece that starts first,
        as in the library (which scans start positions in order and replaces only a strictly better path)."""
        count = tf.shape(scores)[0]
        lengths = tf.range(1, self.max_length + 1)
        by_start = tf.transpose(scores, [1, 2, 0])  # [start, length, word]
        best = tf.concat([tf.zeros([1, count], tf.float64), tf.fill([width, count], tf.constant(-np.inf, tf.float64))],
                         0)
        back = tf.zeros([width + 1, count], tf.int32)

        def step(end, best, back):
            start = end - lengths
            valid = start >= 0
            previous = tf.gather(best, tf.maximum(start, 0))  # [max_length, count]
            score = tf.gather(by_start, tf.maximum(start, 0))  # [max_length, max_length, count]
            score = tf.gather(score, lengths - 1, axis=1, batch_dims=1)  # [max_length, count]
            candidate = tf.where(tf.expand_dims(valid, 1), previous + score, tf.constant(-np.inf, tf.float64))
            top = tf.reduce_max(candidate, axis=0)
            chosen = tf.reduce_max(tf.where(tf.logical_and(candidate == top, candidate > -np.inf),
                                            tf.expand_dims(lengths, 1), 0), axis=0)
            best = tf.tensor_scatter_nd_update(best, [[end]], tf.expand_dims(top, 0))
            back = tf.tensor_scatter_nd_update(back, [[end]], tf.expand_dims(chosen, 0))
            return end + 1, best, back

        _, _, back = tf.while_loop(lambda end, best, back: end <= width, step, (tf.constant(1), best, back))
        return tf.transpose(back)

    def _pieces(self, pieces, ids, back, lengths, width):
        """Walk the best path back from each word's end; the pieces' ids in order, unknowns fused or expanded."""
        count = tf.shape(ids)[0]
        rows = tf.range(count)

        def step(end, starts):
            length = tf.gather(back, end, batch_dims=1)
            active = end > 0
            start = tf.where(active, end - length, 0)
            update = tf.where(active, length, tf.gather(starts, start, batch_dims=1))
            starts = tf.tensor_scatter_nd_update(starts, tf.stack([rows, start], 1), update)
            return start, starts

        _, starts = tf.while_loop(lambda end, starts: tf.reduce_any(end > 0), step,
                                  (lengths, tf.zeros([count, tf.maximum(width, 1)], tf.int32)))
        at = tf.where(starts > 0)  # (word, start), in order
        piece_length = tf.gather_nd(starts, at)
        index = tf.concat([at, tf.expand_dims(tf.cast(piece_length - 1, tf.int64), 1)], 1)
        piece_ids, texts = tf.gather_nd(ids, index), tf.gather_nd(pieces, index)
        row_ids = at[:, 0]
        tokens = tf.RaggedTensor.from_value_rowids(texts, row_ids, nrows=tf.cast(count, tf.int64))
        piece_ids = tf.RaggedTensor.from_value_rowids(piece_ids, row_ids, nrows=tf.cast(count, tf.int64))
        return self.vocabulary.expand(tokens, piece_ids)


_MODELS = {"BPE": _BPE, "Unigram": _Unigram}


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
            if kind not in _MODELS:
                raise UnsupportedPipeline(f"the model {kind!r}")
            self._normalizer = _Normalizer(spec.get("normalizer"))
            self._pre_tokenizer = _PreTokenizer(spec.get("pre_tokenizer"))
            self._model = _MODELS[kind](model_spec, source)
            self.prefix, self.suffix = _special_tokens(spec.get("post_processor"), _vocab_ids(spec))
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
        marked = tf.strings.regex_full_match(texts, f"(?s).*[{_SPLIT}{_MATCH}].*")
        long = tf.strings.length(texts, unit="UTF8_CHAR") > self.max_text_length
        checks = [tf.debugging.Assert(tf.logical_not(tf.reduce_any(marked)), [
            "A text holds the Unicode noncharacter U+FDD0 or U+FDD1, which the tokenizer graph reserves; remove it. "
            "Texts (True = refused):", marked], summarize=64),
                  tf.debugging.Assert(tf.logical_not(tf.reduce_any(long)), [
            f"A text is longer than {self.max_text_length} characters, the limit this tokenizer graph was exported "
            f"with (the model reads only its first {self.context_length} tokens); shorten it, or export with a "
            "larger max_text_length. Texts (True = refused):", long], summarize=64)]
        with tf.control_dependencies(checks):
            texts = tf.identity(texts)
        pieces = self._pre_tokenizer(self._normalizer(texts))
        ids = pieces.with_values(self._model(pieces.values)).merge_dims(1, 2)
        room = self.context_length - len(self.prefix) - len(self.suffix)
        ids = ids[:, :room]
        count = ids.nrows()
        prefix = tf.tile(tf.constant([self.prefix], tf.int32), [count, 1])
        suffix = tf.tile(tf.constant([self.suffix], tf.int32), [count, 1])
        ids = _concat_rows(prefix, tf.cast(ids, tf.int32), suffix)
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
