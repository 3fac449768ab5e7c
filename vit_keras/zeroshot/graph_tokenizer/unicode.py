"""Regular expressions and Unicode for the tokenizer graph: the tokenizers library's Oniguruma patterns in RE2
syntax (what `tf.strings` runs), its `\\w` `\\s` `\\d` read from the library itself, and the patterns that
find text Unicode NFC could change.

Example:
    >>> translate_regex(r"a\\d+").startswith(r"a[\\x{30}-\\x{39}")  # \\d: the library's digits, ASCII first
    True
"""

from __future__ import annotations

import functools
import sys
import unicodedata

import numpy as np

# Oniguruma's Unicode escapes (the tokenizers library's regex engine); their members are read from the installed
# library (`escape_members`), since its Unicode tables and class definitions differ from RE2's named classes.
ESCAPES = "wsd"
# Markers put around regex matches to split on them, and NUL's stand-in through TensorFlow's lowercasing (which
# ends a string at NUL): Unicode noncharacters, which no text should carry (a text that does fails the call).
SPLIT, MATCH, NUL = "\ufdd0", "\ufdd1", "\ufdd2"
RESERVED = (SPLIT, MATCH, NUL)


class UnsupportedPipeline(ValueError):
    """A tokenizer part with no TensorFlow form here."""


@functools.cache
def code_points() -> tuple:
    """Every Unicode scalar value (code points less the surrogates, which no text can hold)."""
    return tuple(point for point in range(sys.maxunicode + 1) if not 0xD800 <= point <= 0xDFFF)


@functools.cache
def every_character() -> str:
    """One text holding every Unicode scalar value, in order."""
    return "".join(map(chr, code_points()))


@functools.cache
def library_ranges(pattern: str) -> tuple:
    """The code points the tokenizers library's regex `pattern` (one character's worth: a class or an escape)
    matches, as sorted inclusive `(first, last)` ranges, read from the library itself: one split of a text holding
    every code point, whose pieces left over are the runs it does not match."""
    from vit_keras.extras import require

    library = require("tokenizers", "zeroshot", "Building a tokenizer's TensorFlow form")
    split = library.pre_tokenizers.Split(library.Regex(f"(?:{pattern})+"), "removed")
    matched = np.ones(len(code_points()), bool)
    for _, (begin, end) in split.pre_tokenize_str(every_character()):  # offsets index code_points()
        matched[begin:end] = False
    return tuple(point_ranges(np.asarray(code_points())[matched]))


def point_ranges(points) -> list:
    """Sorted code points as inclusive `(first, last)` ranges of consecutive values."""
    points = np.asarray(points, np.int64)
    if not len(points):
        return []
    breaks = np.flatnonzero(np.diff(points) != 1)
    firsts = np.concatenate([points[:1], points[breaks + 1]])
    lasts = np.concatenate([points[breaks], points[-1:]])
    return [(int(first), int(last)) for first, last in zip(firsts, lasts)]


@functools.cache
def escape_members(escape: str, in_class: bool = False) -> str:
    """The characters the tokenizers library's `\\<escape>` (w, s, d, or a property such as `p{L}`) matches, alone
    or inside a bracketed class (which differ there: `[\\w]` leaves out some numbers `\\w` takes), as RE2 class
    members (`\\x{..}` ranges), read from the library itself."""
    pattern = f"[\\{escape}]" if in_class else f"\\{escape}"
    return ranges_class(library_ranges(pattern))[1:-1]


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
            elif escape in "pP":  # a Unicode property: its members as the library's tables have them
                end = pattern.index("}", i) + 1 if pattern[i + 2:i + 3] == "{" else i + 3
                members = escape_members(pattern[i + 1:end], in_class)
                out.append(members if in_class else f"[{members}]")
                i = end
                continue
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


def literal(text: str) -> str:
    """`text` as an RE2 pattern matching it literally."""
    return "".join(f"\\x{{{ord(char):X}}}" for char in text)


def rewrite(text: str) -> str:
    """`text` as an RE2 rewrite string (backslashes escaped)."""
    return text.replace("\\", "\\\\")


def char_class(codepoints) -> str:
    """Code points as an RE2 bracketed class."""
    return ranges_class(point_ranges(sorted(set(codepoints))))


def ranges_class(ranges) -> str:
    """Inclusive `(first, last)` code-point ranges as an RE2 bracketed class."""
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
    all_marks = char_class(set().union(*marks_by_class.values()))
    by_firsts = {}  # the composing marks grouped by the characters they compose with
    for second, firsts in composable.items():
        by_firsts.setdefault(frozenset(firsts), set()).add(second)
    parts = [char_class(replaced)]
    parts += [f"{char_class(firsts)}{all_marks}*{char_class(seconds)}" for firsts, seconds in by_firsts.items()]
    classes = sorted(marks_by_class)
    for index, combining in enumerate(classes[1:], start=1):
        lower = set().union(*(marks_by_class[c] for c in classes[:index]))
        parts.append(f"{char_class(marks_by_class[combining])}{char_class(lower)}")
    return tuple(parts)
