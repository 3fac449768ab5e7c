"""The tokenizer models as TensorFlow ops: BPE (merges applied lowest rank first, leftmost first) and Unigram
(Viterbi), with the vocabulary's unknown-token and byte-fallback rules."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from vit_keras.zeroshot.graph_tokenizer.tensors import each, table
from vit_keras.zeroshot.graph_tokenizer.unicode import UnsupportedPipeline

_MERGE_SEPARATOR = "\x00"
_NO_MERGE = np.iinfo(np.int32).max
UNIGRAM_UNK_PENALTY = 10.0  # tokenizers' Unigram: the unknown token scores the vocabulary's lowest minus this


class _Vocabulary(tf.Module):
    """Token → id, the byte-fallback tokens, and the expansion of the final tokens into ids."""

    def __init__(self, vocab: dict, unk_id, byte_fallback: bool, fuse_unk: bool):
        super().__init__()
        self.ids = table(list(vocab), list(vocab.values()), -1)
        self.unk_id, self.byte_fallback, self.fuse_unk = unk_id, byte_fallback, fuse_unk
        self.bytes = None
        if byte_fallback:
            names = [f"<0x{byte:02X}>" for byte in range(256)]
            missing = [name for name in names if name not in vocab]
            if missing:
                raise UnsupportedPipeline(f"byte fallback without the byte tokens {missing[:3]} in the vocabulary")
            self.bytes = table([bytes([byte]) for byte in range(256)], [vocab[name] for name in names], -1)

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
        return each(lambda flags, values: tf.where(flags, tf.cast(self.unk_id, values.dtype), values), unknown, ids)


class _BPE(tf.Module):
    def __init__(self, spec):
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
                                      bool(spec.get("byte_fallback", False)), bool(spec.get("fuse_unk", False)))
        merges = [merge.split(" ", 1) if isinstance(merge, str) else merge for merge in spec["merges"]]
        keys = [f"{left}{_MERGE_SEPARATOR}{right}" for left, right in merges]
        # the first of two identical merges wins, as in the library
        ranks = {}
        for rank, key in enumerate(keys):
            ranks.setdefault(key, rank)
        self.ranks = table(list(ranks), list(ranks.values()), _NO_MERGE)

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
        return self.vocabulary.expand(tokens, each(self.vocabulary.ids.lookup, tokens))

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
    def __init__(self, spec):
        super().__init__()
        vocab = spec["vocab"]
        pieces = {piece: index for index, (piece, _) in enumerate(vocab)}
        unk_id = spec.get("unk_id")
        self.vocabulary = _Vocabulary(pieces, unk_id, bool(spec.get("byte_fallback", False)), True)
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


MODELS = {"BPE": _BPE, "Unigram": _Unigram}
