"""How a script writes its words: between spaces (Latin, Cyrillic, Devanagari, ...) or as
running text without them (Japanese, Chinese, Thai, ...). Terms (decoding/terms.py), glossaries
and their measure (tasks/metrics.py's term use) ask it of a term's first and last character:
whether it must begin or end a word, or may sit inside one. Pre-tokenized text puts spaces
around every word whatever its script, so there every word's edges count."""

from __future__ import annotations

import re
import unicodedata

# The blocks of the scripts written without spaces between words, by code point (Python's `re`
# has no Unicode script classes): Thai and Lao, Tibetan, Myanmar, Khmer, the CJK marks and
# numerals (々 〆 〇, 〡-〩, 〱-〵, 〻 〼), kana, CJK ideographs, fullwidth digits and letters
# ("１０", "ＰＣ": written inside running CJK text), halfwidth katakana.
UNSPACED_BLOCKS = (
    ("\u0e00", "\u0eff"), ("\u0f00", "\u0fff"), ("\u1000", "\u109f"), ("\u1780", "\u17ff"),
    ("\u19e0", "\u19ff"), ("\u3005", "\u3007"), ("\u3021", "\u3029"), ("\u3031", "\u3035"),
    ("\u303b", "\u303c"), ("\u3040", "\u30ff"), ("\u31f0", "\u31ff"), ("\u3400", "\u4dbf"),
    ("\u4e00", "\u9fff"), ("\uf900", "\ufaff"), ("\uff10", "\uff5a"), ("\uff66", "\uff9f"),
    ("\U00020000", "\U0003134f"),
)  # fmt: skip
_UNSPACED = "".join(f"{first}-{last}" for first, last in UNSPACED_BLOCKS)
# A word character of a spaced script: what may not stand beside a whole word in running text.
_SPACED_WORD = rf"[^\W{_UNSPACED}]"


def word_char(char: str) -> bool:
    """A letter, digit or mark (an Indic vowel sign): part of a word."""
    return char.isalnum() or unicodedata.category(char).startswith("M")


def unspaced(char: str) -> bool:
    """A letter or digit of a script written without spaces between words."""
    return char.isalnum() and any(first <= char <= last for first, last in UNSPACED_BLOCKS)


def spaced(char: str) -> bool:
    """A word character of a script that separates words by spaces."""
    return word_char(char) and not unspaced(char)


def bounds_words(char: str, tokenized: bool = False) -> bool:
    """Whether a word character next to `char` would make one longer word of them, so a term
    at this edge must meet a space or punctuation: in pre-tokenized text next to any word
    character, else next to one of a spaced script."""
    return word_char(char) if tokenized else spaced(char)


def as_words(term: str, tokenized: bool = False) -> str:
    """A regular expression matching the phrase `term` as whole words: its words apart by any
    spaces, and beside each edge no word character of a spaced script ("Hund" not in "Hunde",
    "iPhone" in "新しいiPhoneを"; in `tokenized` text no word character at all), except at an
    edge in a script without spaces in running text ("犬" in "私は犬が")."""
    return "".join(_parts(term, tokenized))


def any_of_words(terms: list[str], tokenized: bool = False) -> re.Pattern:
    """One pattern matching any of `terms` as whole words (`as_words`), the earlier of two
    that match at one place. The terms are grouped by the check before them, made once a place
    for the group rather than once a term: thousands of terms stay fast. (Two terms of
    different groups cannot match at one place: one begins in a script without spaces.)"""
    groups: dict[str, list[str]] = {}
    for term in terms:
        before, rest = _parts(term, tokenized)
        groups.setdefault(before, []).append(rest)
    alternatives = [before + "(?:" + "|".join(rests) + ")" for before, rests in groups.items()]
    return re.compile("|".join(alternatives) or "(?!)")  # no terms: a pattern that never matches


def _parts(term: str, tokenized: bool) -> tuple[str, str]:
    """`as_words`'s pattern as the check before the term, then the term and the check after."""
    words = term.split()
    neighbour = r"\w" if tokenized else _SPACED_WORD
    before = "" if not tokenized and unspaced(words[0][0]) else rf"(?<!{neighbour})"
    after = "" if not tokenized and unspaced(words[-1][-1]) else rf"(?!{neighbour})"
    return before, r"\s+".join(map(re.escape, words)) + after
