"""Sentences handed to the Python API: a list (or any iterable) of str, one sentence each. A str
where the list belongs would be read character by character, and a generator used up by a first
pass over it would leave nothing for the second: both silently wrong, so refused or read once
here, for every function that takes sentences."""

from __future__ import annotations

from collections.abc import Iterable


def sentence_list(lines: Iterable[str], name: str = "lines") -> list[str]:
    """`lines` as a list of str; TypeError naming `name` and the fix otherwise."""
    if isinstance(lines, str | bytes):
        raise TypeError(
            f"{name} must be a list of sentences, not one {type(lines).__name__}: for one "
            f"sentence pass [{lines[:30]!r}]"
        )
    try:
        lines = list(lines)
    except TypeError:
        raise TypeError(f"{name} must be a list of str, not {type(lines).__name__}") from None
    for number, line in enumerate(lines):
        if not isinstance(line, str):
            raise TypeError(f"{name}[{number}] is a {type(line).__name__}, not a str")
    return lines
