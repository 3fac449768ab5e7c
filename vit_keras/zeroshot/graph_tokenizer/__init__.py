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
- Regular expressions: `tokenizers`' Oniguruma patterns run as RE2, with `\\w`, `\\s`, `\\d` and Unicode
  properties (`\\p{L}` ...) as the characters the installed library matches (read from it, every code point);
  lookaround and backreferences are refused when the graph is built.
- Unicode versions: TensorFlow's lowercasing and the NFC check carry older Unicode tables than the library, so a
  text holding a code point on which they differ (letters added since, see `unicode_gaps`) is refused, naming it.
- Texts longer than `max_text_length` characters (2,048), texts that are not valid UTF-8 and texts holding U+FDD0
  to U+FDD2 (noncharacters the graph uses as markers) are refused.
- Added tokens (`"<|endoftext|>"` written in a text) are cut out as the library cuts them, before or after the
  normaliser as each token says; one with lstrip, rstrip or single_word matching rules is refused in a text.

Example:
    >>> import tensorflow as tf
    >>> from vit_keras.zeroshot.tokenizer import Tokenizer
    >>> tokenizer = Tokenizer.from_directory("tests/fixtures/zeroshot/clip/checkpoint", context_length=16,
    ...                                      family="clip")
    >>> graph = GraphTokenizer.from_tokenizer(tokenizer)
    >>> ids, mask = graph(tf.constant(["a photo of a cat"]))
    >>> bool((ids.numpy() == tokenizer(["a photo of a cat"])[0]).all())
    True
"""

from vit_keras.zeroshot.graph_tokenizer.tokenizer import MAX_TEXT_LENGTH, GraphTokenizer
from vit_keras.zeroshot.graph_tokenizer.unicode import (
    UnsupportedPipeline,
    escape_members,
    nfc_changes_patterns,
    translate_regex,
)

__all__ = ["MAX_TEXT_LENGTH", "GraphTokenizer", "UnsupportedPipeline", "escape_members", "nfc_changes_patterns",
           "translate_regex"]
