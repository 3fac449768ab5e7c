"""The code points on which the tokenizer graph's Unicode data and the tokenizers library's differ, for the steps a
pipeline runs; the graph refuses a text holding one rather than answering with other ids.

TensorFlow, Python and the library each carry Unicode tables of their own version (TensorFlow 2.21's ICU and RE2,
Python 3.11's `unicodedata` 14.0, the library's Rust and Oniguruma tables 15-16), so letters added since differ:
- Regex classes (`\\w`, `\\s`, `\\d`, `\\p{L}` ...): none. The graph's classes are the library's own members
  (`unicode.escape_members`), so they agree on every code point.
- Lowercase: TensorFlow lowercases with ICU's tables, the library with Rust's; every code point is lowercased both
  ways once and those that come out different are refused (U+A7CB, Vithkuqi, Garay capitals ...).
- NFC: the graph's check for text NFC could change is built from Python's tables, so characters those tables do not
  know (unassigned in Python's Unicode version: U+A7CB, Kirat Rai, Tulu-Tigalari, CJK extension I ...) are refused.
  Unicode's normalisation stability policy keeps the decompositions and combining classes of assigned characters
  fixed between versions, so the characters Python knows normalise alike in every version.

Example:
    >>> from vit_keras.zeroshot.graph_tokenizer.unicode_gaps import unshared_ranges
    >>> any(first <= 0xA7CB <= last for first, last in unshared_ranges(lowercase=False, nfc=True))
    True
"""

from __future__ import annotations

import functools
import unicodedata

from vit_keras.zeroshot.graph_tokenizer.unicode import code_points, point_ranges

# The line break joins the code points into one text for the library: lowercasing keeps it, and never makes one.
_SEPARATOR = "\n"


@functools.cache
def lowercase_differs() -> frozenset:
    """The code points whose lowercase differs between the graph (`pipeline.lowercase`) and the library."""
    import tensorflow as tf

    from vit_keras.extras import require
    from vit_keras.zeroshot.graph_tokenizer.pipeline import lowercase

    library = require("tokenizers", "zeroshot", "Building a tokenizer's TensorFlow form")
    points = [point for point in code_points() if chr(point) != _SEPARATOR]
    text = _SEPARATOR.join(map(chr, points))
    expected = library.normalizers.Lowercase().normalize_str(text).split(_SEPARATOR)
    found = lowercase(tf.constant([text])).numpy()[0].decode().split(_SEPARATOR)
    return frozenset(point for point, want, got in zip(points, expected, found, strict=True) if want != got)


@functools.cache
def unknown_to_python() -> frozenset:
    """The code points Python's `unicodedata` has unassigned (it builds the NFC check)."""
    return frozenset(point for point in code_points() if unicodedata.category(chr(point)) == "Cn")


@functools.cache
def unshared_ranges(*, lowercase: bool, nfc: bool) -> tuple:
    """Inclusive `(first, last)` ranges of the code points a pipeline with these steps refuses."""
    points = (lowercase_differs() if lowercase else frozenset()) | (unknown_to_python() if nfc else frozenset())
    return tuple(point_ranges(sorted(points)))
