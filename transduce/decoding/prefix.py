"""Decoding that continues a given start of the output: each output's text begins with it.

Interactive translation works this way (Knowles and Koehn 2016; Wuebker et al. 2016): a
translator accepts or types the start of the translation and the model completes it, the best
completion given that start, which the model's own best translation need not begin with. So
does fairseq's `--prefix-size` and CTranslate2's `target_prefix`, with whole tokens. A typed
start usually ends inside a word ("ein kleiner hu"), so here the start is text: its whole words
are forced piece by piece as the vocabulary encodes them, and then the pieces that may follow
are those that spell the unfinished word on ("▁hu", "▁hund", "▁h" then "und", ...: any word it
begins); a start that ends in a space asks for a new word next. Search runs as before, with
every other token ruled out while a hypothesis is inside its start (a `Constraint`, as
constrained parsing's). The forced tokens keep the model's probabilities: a completed
hypothesis's log-probability is that of its whole output, prefix included, the number
`transduce score` gives the same pair, and its text includes the prefix.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..config import TaskConfig
from ..data.bpe import Vocab
from ..tasks.translation import TRANSLATION
from .constraints import WORD_START, Constraint


class PieceTable:
    """A vocabulary's pieces as text, to tell which may continue an unfinished word; one per
    vocabulary (`of`), its answers kept (a server meets the same words again)."""

    KEPT = 1024  # answers (10 KB each at 10,000 pieces): the most kept at once

    def __init__(self, vocab: Vocab):
        self.pieces, self.eos = vocab.pieces(list(range(vocab.size))), vocab.eos
        self.specials = {vocab.pad, vocab.unk, vocab.bos, vocab.eos}
        self._allowed: dict[tuple[str, bool], Tensor] = {}

    @staticmethod
    @functools.lru_cache(maxsize=4)
    def of(vocab: Vocab) -> PieceTable:
        return PieceTable(vocab)

    def allowed(self, rest: str, new_word: bool) -> Tensor:
        """(V,) which pieces may come next when `rest` remains to be spelled (empty: a new word
        is all that is asked) and the next piece must (`new_word`) or must not start a word."""
        key = (rest, new_word)
        if key not in self._allowed:
            if len(self._allowed) >= self.KEPT:
                self._allowed.clear()
            self._allowed[key] = torch.tensor(
                [i not in self.specials and _continues(piece, rest, new_word)
                 for i, piece in enumerate(self.pieces)] )  # fmt: skip
            if not rest:
                self._allowed[key][self.eos] = True  # "ein kleiner " may end there too
        return self._allowed[key]

    def spelled(self, token: int, rest: str) -> str:
        """What of `rest` remains after `token` (empty once the word is spelled or outgrown)."""
        text = self.pieces[token].removeprefix(WORD_START)
        return rest[len(text) :] if rest.startswith(text) else ""


def _continues(piece: str, rest: str, new_word: bool) -> bool:
    if piece.startswith(WORD_START) != new_word:
        return False
    text = piece.removeprefix(WORD_START)
    if not rest:
        return True  # a new word, any
    return rest.startswith(text) or text.startswith(rest)  # "▁" alone spells nothing yet


@dataclass(frozen=True)
class Prefix:
    """The start of one output: whole pieces forced one a step, then pieces that spell `rest`
    (an unfinished word's characters), or, with `new_word` and no `rest`, one starting a word.
    `table` is the vocabulary's, needed only for `rest` and `new_word`."""

    ids: tuple[int, ...] = ()
    rest: str = ""
    new_word: bool = False
    table: PieceTable | None = None

    def __bool__(self) -> bool:
        return bool(self.ids or self.rest or self.new_word)

    @property
    def most_tokens(self) -> int:
        """The most tokens it can take: its ids, then a lone word start ("▁") and a piece for
        each character of `rest`, or one piece for a new word."""
        return len(self.ids) + (len(self.rest) + 1 if self.rest else int(self.new_word))


def parse_prefixes(
    vocab: Vocab, texts: Sequence[str], task: TaskConfig = TRANSLATION
) -> list[Prefix]:
    """Each text as a `Prefix` over `vocab` ('': none); ValueError for one with characters the
    vocabulary lacks, since no output could start with it, and for a model of another `task`
    (a parser's outputs are linearised trees, not text to start)."""
    if task.name != "translation":
        raise ValueError(f"a prefix is for translation, not for a {task.name} model")
    table, prefixes = PieceTable.of(vocab), []
    for number, text in enumerate(texts, start=1):
        if lacking := vocab.lacking(c for c in text if not c.isspace()):  # spaces split words
            raise ValueError(f"prefix {number}: the model's vocabulary lacks {''.join(lacking)!r}, "
                             "so no output of it can start so")  # fmt: skip
        words = text.split()
        ends_a_word = bool(text) and text[-1].isspace()
        whole = words if ends_a_word else words[:-1]
        rest = "" if ends_a_word or not words else _normalised(vocab, words[-1])
        ids = tuple(vocab.encode([" ".join(whole)])[0]) if whole else ()
        prefixes.append(Prefix(ids, rest, bool(words), table))
    return prefixes


def _normalised(vocab: Vocab, word: str) -> str:
    """The word as the vocabulary writes it (its normalisation, e.g. NFKC)."""
    return vocab.decode([vocab.encode([word])[0]])[0].strip()


class PrefixConstraint:
    """Each row's prefix, forced one token a step from the first; the rows follow the search's
    hypotheses (`reorder`), which may spell an unfinished word in different pieces."""

    def __init__(self, prefixes: Sequence[Prefix], device: torch.device):
        width = max((len(prefix.ids) for prefix in prefixes), default=0)
        tokens = torch.full((len(prefixes), width), -1, dtype=torch.long)  # -1: none due
        for row, prefix in enumerate(prefixes):
            tokens[row, : len(prefix.ids)] = torch.tensor(prefix.ids, dtype=torch.long)
        self.tokens = tokens.to(device)
        self.step = 0  # tokens generated so far: the same for every row of a search
        # After its ids, what each row has still to spell, and whether its next piece starts a
        # word; None once the row is free.
        self.spelling: list[tuple[str, bool] | None] = [
            (p.rest, p.new_word) if p.rest or p.new_word else None for p in prefixes
        ]
        self.spelling_any = any(self.spelling)
        self.forced = [len(prefix.ids) for prefix in prefixes]
        self.most_tokens = torch.tensor([p.most_tokens for p in prefixes], device=device)
        self.table = next((p.table for p in prefixes if p.table is not None), None)
        if self.table is None and self.spelling_any:
            raise ValueError("a prefix with an unfinished word needs its vocabulary's table")

    def restrict(self, log_probs: Tensor, room: Tensor) -> None:
        """In place: a row inside its whole pieces keeps the log-probability of the next one
        and rules out every other; a row spelling a word keeps only the pieces that spell on."""
        if self.step < self.tokens.size(1):
            due = self.tokens[:, self.step]
            rows = (due >= 0).nonzero().flatten()
            forced = log_probs[rows, due[rows]]
            log_probs[rows] = float("-inf")
            log_probs[rows, due[rows]] = forced
        for row, spelling in enumerate(self.spelling if self.spelling_any else ()):
            if spelling is not None and self.step >= self.forced[row]:
                allowed = self.table.allowed(*spelling).to(log_probs.device)
                log_probs[row].masked_fill_(~allowed, float("-inf"))

    def reorder(self, rows: Tensor) -> None:
        """Rows follow the search's hypotheses: keep `rows`, in that order."""
        self.tokens = self.tokens[rows]
        order = rows.tolist()
        self.spelling = [self.spelling[i] for i in order]
        self.forced = [self.forced[i] for i in order]

    def advance(self, tokens: Tensor) -> None:
        """Each row takes its next token: a spelling row spells on, or is done."""
        if not self.spelling_any:
            self.step += 1
            return
        for row, token in enumerate(tokens.tolist()):
            spelling = self.spelling[row]
            if spelling is None or self.step < self.forced[row]:
                continue
            rest = self.table.spelled(token, spelling[0]) if spelling[0] else ""
            self.spelling[row] = (rest, False) if rest else None
        self.spelling_any = any(self.spelling)
        self.step += 1


def with_prefixes(
    prefixes: Sequence[Prefix | Sequence[int]] | None,
    constraint: Constraint | None,
    limit: Tensor,
) -> tuple[Constraint | None, Tensor]:
    """The search's constraint and length limits (B,) with each sentence's prefix (a `Prefix`,
    or token ids to force) made the start of its outputs: a limit too short for the prefix and
    an EOS is raised to that (the prefix is the caller's to keep within the model's positions)."""
    if prefixes is None:
        return constraint, limit
    if constraint is not None:
        raise ValueError("a prefix with constrained parsing is not supported: give one of them")
    if len(prefixes) != limit.numel():
        raise ValueError(f"{len(prefixes)} prefixes for {limit.numel()} sentences: give one each")
    prefixes = [p if isinstance(p, Prefix) else Prefix(tuple(p)) for p in prefixes]
    shortest = torch.tensor([p.most_tokens + 1 for p in prefixes], device=limit.device)
    return PrefixConstraint(prefixes, limit.device), torch.maximum(limit, shortest)
