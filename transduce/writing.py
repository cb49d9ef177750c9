"""How a script writes its words: between spaces (Latin, Cyrillic, Devanagari, ...) or as
running text without them (Japanese, Chinese, Thai, ...). Terms (decoding/terms.py) and their
measure (tasks/metrics.py's term use) ask it of a term's first and last character: whether it
must begin or end a word, or may sit inside one. Pre-tokenized text puts spaces around every
word whatever its script, so there every word's edges count."""

from __future__ import annotations

import re
import unicodedata

# The Unicode names' first words of the scripts written without spaces between words.
UNSPACED = ("CJK", "HIRAGANA", "KATAKANA", "THAI", "LAO", "KHMER", "MYANMAR", "TIBETAN")


def word_char(char: str) -> bool:
    """A letter, digit or mark (an Indic vowel sign): part of a word."""
    return char.isalnum() or unicodedata.category(char).startswith("M")


def spaced(char: str) -> bool:
    """A word character of a script that separates words by spaces."""
    return word_char(char) and not unicodedata.name(char, "").startswith(UNSPACED)


def unspaced(char: str) -> bool:
    """A letter of a script written without spaces between words."""
    return char.isalnum() and unicodedata.name(char, "").startswith(UNSPACED)


def bounds_words(char: str, tokenized: bool = False) -> bool:
    """Whether a word character next to `char` would make one longer word of them, so a term
    at this edge must meet a space or punctuation: in pre-tokenized text next to any word
    character, else next to one of a spaced script."""
    return word_char(char) if tokenized else spaced(char)


def as_words(term: str, tokenized: bool = False) -> str:
    """A regular expression matching the phrase `term` as whole words: its words apart by any
    spaces, at each edge that bounds a word (bounds_words) no word character beside it."""
    words = r"\s+".join(map(re.escape, term.split()))
    before = r"(?<!\w)" if bounds_words(term[0], tokenized) else ""
    after = r"(?!\w)" if bounds_words(term[-1], tokenized) else ""
    return before + words + after
