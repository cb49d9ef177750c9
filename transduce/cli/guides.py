"""What guides each line's output in `transduce translate`: --prefix and --terms (an entry a
line of the input), --glossary (terms for the lines that use its entries) and --avoid (phrases
no line's output may hold). Read before the model loads, checked once it has (`Guides.check`),
so that a mistake fails the command before anything is written, then handed to the translator
group by group (`Guides.of_group`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("transduce")


def add_guide_arguments(p) -> None:
    """What the output must start with or hold: interactive translation, terminology."""
    group = p.add_argument_group("guided output", "what each output must start with or hold")
    group.add_argument(
        "--prefix",
        type=Path,
        help="a file of output starts, one a line of the input ('' for none): each output "
        "begins with its line's, the model's best completion of it (interactive translation; "
        "the last word may be unfinished, a final space asks for a new word)",
    )
    group.add_argument(
        "--terms",
        type=Path,
        help="a file of terms, one line a line of the input: phrases separated by tabs ('' for "
        "none), each of which its output must hold, e.g. a glossary's translations (lexically "
        "constrained beam search; such a line's beam is the run's decode.terms_beam, 8, "
        "unless --beam says otherwise: a wider beam places them better)",
    )
    group.add_argument(
        "--avoid",
        type=Path,
        help="a file of phrases, one a line, that no output may hold, for every input line (a "
        "banned word; its tokens as the vocabulary encodes it alone never come in a row; in "
        "running text of a script without spaces, its characters in any pieces)",
    )
    group.add_argument(
        "--glossary",
        type=Path,
        help="a file of 'source<TAB>translation' lines: a line of the input that uses a source "
        "phrase (whole words, any case) gets its translation as a term, beside its --terms",
    )


class Guides:
    """The guiding files of one `translate` command, read."""

    def __init__(self, args):
        self.files = _per_line_files(args)
        self.glossary = _glossary(args.glossary)
        self.avoided = None if args.avoid is None else _lines(args.avoid)

    def check(self, translator) -> None:
        """What would fail a line later: a glossary translation the vocabulary lacks, and a
        term (of --terms or the glossary) that holds an avoided phrase."""
        from ..decoding.avoid import check_terms, parse_avoided
        from ..decoding.terms import parse_terms
        from ..tasks.translation import is_tokenized

        vocab, task = translator.vocab, translator.task.config
        banned = parse_avoided(vocab, self.avoided or [], task)
        if self.glossary is not None:
            self.glossary = self.glossary.for_text(is_tokenized(task))
            self.glossary.check(vocab, banned, task)
        if banned and "terms" in self.files:
            check_terms(banned, parse_terms(vocab, self.files["terms"].entries, task), vocab)

    def of_group(self, lines: list[str], done: int) -> dict:
        """The guides of the group of `lines` after the first `done` input lines, by the names
        `Translator.translate` gives them."""
        guides = {name: file.of_group(done, len(lines)) for name, file in self.files.items()}
        if self.glossary is not None:
            guides["terms"] = _with_glossary(self.glossary, lines, guides.get("terms"), done)
        if self.avoided is not None:
            guides["avoid"] = self.avoided
        return guides

    def check_counts(self, lines: int) -> None:
        """Each per-line file has one entry a line of the input."""
        for file in self.files.values():
            file.check(lines)


@dataclass
class PerLine:
    """A file with an entry for each line of the input: --prefix's starts, --terms' phrases."""

    flag: str
    path: Path
    entries: list

    def of_group(self, done: int, lines: int) -> list:
        """The entries of the group of `lines` input lines after the first `done`: one each."""
        if len(self.entries) < done + lines:
            raise ValueError(self._mismatch(f"{done + lines} or more"))
        return self.entries[done : done + lines]

    def check(self, lines: int) -> None:
        if len(self.entries) != lines:
            raise ValueError(self._mismatch(lines))

    def _mismatch(self, lines) -> str:
        return (f"{self.flag} {self.path} has {len(self.entries)} lines, the input {lines}: "
                "give one a line ('' for none)")  # fmt: skip


def _with_glossary(glossary, lines: list[str], given, done: int) -> list[list[str]]:
    """Each line's terms with those of the glossary entries it uses, at most MAX_TERMS in
    all: a line that uses more keeps the first it uses, said once a line."""
    from ..decoding.terms import MAX_TERMS

    terms, every = glossary.terms(lines, given, MAX_TERMS), glossary.terms(lines, given)
    for number, (kept, all_) in enumerate(zip(terms, every, strict=True), start=done + 1):
        if len(kept) < len(all_):
            logger.warning("line %d: %d terms with the glossary's, the first %d kept", number,
                           len(all_), MAX_TERMS)  # fmt: skip
    return terms


def _lines(path: Path) -> list[str]:
    """A file's lines, a carriage return at the end of each dropped (a file written on
    Windows): a prefix's final space asks for a new word, a final CR is no such request."""
    from ..data.corpus import read_lines

    return [line.removesuffix("\r") for line in read_lines(path)]


def _glossary(path: Path | None):
    if path is None:
        return None
    from ..decoding.glossary import Glossary

    glossary = Glossary.read(path)
    logger.info("glossary %s: %d entries", path, len(glossary))
    return glossary


def _per_line_files(args) -> dict[str, PerLine]:
    """--prefix and --terms, those given, by the name `Translator.translate` gives them."""
    files = {}
    for name, flag, path in [("prefixes", "--prefix", args.prefix),
                             ("terms", "--terms", args.terms)]:  # fmt: skip
        if path is not None:
            lines = _lines(path)
            entries = lines if name == "prefixes" else [line.split("\t") for line in lines]
            files[name] = PerLine(flag, path, entries)
    return files
