"""A glossary: source phrases and how each must be translated, applied to the lines that use
them. A line that holds a glossary's source phrase gets its translation as a term
(`decoding/terms.py`), as a translation service's glossary works (DeepL, ModernMT): the user
keeps one file for a client or a domain instead of writing the terms of every line.

A source phrase matches as whole words, whatever their case or Unicode composition ("Dog" and
"dog", not "dogma"); matches do not overlap, the first in the line first, and at one place the
longer entry wins ("hot dog" rather than "hot")."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..config import TaskConfig
from ..data.bpe import Vocab
from ..tasks.translation import TRANSLATION
from ..writing import any_of_words


def _folded(text: str) -> str:
    """Text as it is matched: composed (NFC), then case-folded ("Straße" as "strasse")."""
    return unicodedata.normalize("NFC", text).casefold()


class Glossary:
    """Source phrase -> its translation, matched in lines as whole words, case ignored. A
    phrase's edge in a script written without spaces may sit inside a word ("犬" in "私は犬が"),
    unless the source text is pre-tokenized (`tokenized`: every word between spaces)."""

    def __init__(self, entries: Iterable[tuple[str, str]], tokenized: bool = False):
        self.tokenized = tokenized
        self.entries: dict[str, str] = {}
        for number, (source, target) in enumerate(entries, start=1):
            source, target = " ".join(source.split()), " ".join(target.split())
            if not source or not target:
                raise ValueError(f"glossary entry {number}: a source phrase and its translation, "
                                 f"both non-empty (got {source!r} -> {target!r})")  # fmt: skip
            known = self.entries.get(_folded(source))
            if known is not None and known != target:
                raise ValueError(f"glossary entry {number}: {source!r} is translated both "
                                 f"{known!r} and {target!r}")  # fmt: skip
            self.entries[_folded(source)] = target
        # Longest first, so that a longer phrase is matched before a phrase inside it.
        sources = sorted(self.entries, key=len, reverse=True)
        self._pattern = any_of_words(sources, tokenized)

    def for_text(self, tokenized: bool) -> Glossary:
        """The same entries matched in text that is (or is not) pre-tokenized."""
        return self if tokenized == self.tokenized else Glossary(self.entries.items(), tokenized)

    @classmethod
    def read(cls, path: Path | str, tokenized: bool = False) -> Glossary:
        """A file of 'source<TAB>translation' lines (UTF-8; blank lines and lines starting
        with '#' skipped)."""
        from ..data.corpus import read_lines

        entries = []
        for number, line in enumerate(read_lines(Path(path)), start=1):
            line = line.removesuffix("\r")
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2:
                raise ValueError(f"{path} line {number}: expected 'source<TAB>translation', "
                                 f"got {len(fields)} field(s)")  # fmt: skip
            entries.append((fields[0], fields[1]))
        return cls(entries, tokenized)

    def __len__(self) -> int:
        return len(self.entries)

    def terms_of(self, line: str) -> list[str]:
        """The translations of the entries `line` uses, in the order they occur, each once."""
        if not self.entries:
            return []
        found = (self.entries[" ".join(m.group().split())]
                 for m in self._pattern.finditer(_folded(line)))  # fmt: skip
        return list(dict.fromkeys(found))

    def terms(
        self,
        lines: Sequence[str],
        given: Sequence[Sequence[str]] | None = None,
        most: int | None = None,
    ) -> list[list[str]]:
        """Each line's terms: those `given` for it (if any), then the glossary's, these up to
        `most` terms in all (a line that uses many entries keeps those it uses first)."""
        given = given if given is not None else [[] for _ in lines]
        if len(given) != len(lines):
            raise ValueError(f"{len(given)} term lists for {len(lines)} lines: give one each")
        terms = []
        for line, own in zip(lines, given, strict=True):
            added = [t for t in self.terms_of(line) if t not in own]
            room = len(added) if most is None else max(most - len(own), 0)
            terms.append([*own, *added[:room]])
        return terms

    def check(self, vocab: Vocab, avoided=None, task: TaskConfig = TRANSLATION) -> None:
        """ValueError naming the translations with characters `vocab` lacks (no output of its
        model could hold them) or, given `avoided` (`decoding/avoid.py`'s Terms), one that holds
        an avoided phrase (read as `task`'s text is written, `TaskConfig`): found now, not at the
        line that first uses one."""
        bad = {t: vocab.lacking(c for c in t if not c.isspace()) for t in self.entries.values()}
        bad = {t: "".join(chars) for t, chars in bad.items() if chars}
        if bad:
            named = ", ".join(f"{t!r} ({chars!r})" for t, chars in list(bad.items())[:5])
            raise ValueError(f"{len(bad)} glossary translation(s) with characters the model's "
                             f"vocabulary lacks: {named}")  # fmt: skip
        if avoided:
            from .avoid import check_terms
            from .terms import parse_terms

            translations = list(self.entries.values())
            try:
                check_terms(avoided, parse_terms(vocab, [[t] for t in translations], task), vocab)
            except ValueError as error:  # "line N: the term ..." of entry N
                raise ValueError(f"glossary {error}".replace("line", "entry", 1)) from error
