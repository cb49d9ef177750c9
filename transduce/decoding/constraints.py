"""Constrained search for parsing: only linearised trees over exactly the input's words.

The paper's search (s6.3) is unconstrained, and so is ours by default: a decoded sequence that
is not a tree over the input is repaired afterwards (data/linearize.py). A small model trained
on little data writes such sequences nearly always, and repair can only guess where missing
words go. `TreeConstraint` instead masks, at every step of the search, each token that could
not continue a well-formed tree:

- an opener `(X` while words remain to be placed and the root is open (or not yet opened), and
  the length limit leaves room to close it and everything open around it;
- a placeholder `XX` inside the root while words remain: exactly one per input word;
- only the closer of the innermost open bracket, never straight after its opener (no empty
  brackets), and the root's only once every word is placed;
- the end only once the root has closed.

The search stays the same beam search over the model's probabilities (not renormalised): a
masked token is simply not a candidate. A row left with no allowed token (a length limit too
short for any tree) is not constrained, so the search can always end.
"""

from __future__ import annotations

import functools
from typing import Protocol

import torch
from torch import Tensor

from ..data.bpe import Vocab
from ..data.linearize import PLACEHOLDER

WORD_START = "\u2581"  # SentencePiece's mark at the start of each word's first piece


class Constraint(Protocol):
    """What search asks of a constraint: one state per row of the search, from one row per
    sentence at the start (`TreeConstraint`; a forced prefix, `decoding/prefix.py`)."""

    def restrict(self, log_probs: Tensor, room: Tensor) -> None:
        """Rule out, in place (-inf), the tokens each row may not take next; `room` (N,) is each
        row's tokens left before the end must come."""

    def reorder(self, rows: Tensor) -> None:
        """Rows follow the search's hypotheses: keep `rows`, in that order."""

    def advance(self, tokens: Tensor) -> None:
        """Each row takes its next token."""


def rule_out(log_probs: Tensor, rows: Tensor, tokens: Tensor) -> Tensor:
    """Make each (rows[i], tokens[i]) impossible (-inf), in place, except in a row that would
    then have no token at all: it keeps them (what a prefix or a term forces wins over what a
    rule forbids). Returns (N,) those rows, left with nothing."""
    before = log_probs[rows, tokens]
    log_probs[rows, tokens] = float("-inf")
    stuck = log_probs.amax(dim=1) == float("-inf")
    if bool(stuck.any()):
        back = stuck[rows]
        log_probs[rows[back], tokens[back]] = before[back]
    return stuck


class TreeConstraint:
    """The state of each hypothesis of a batch's search: words placed, brackets open."""

    def __init__(self, vocab: Vocab, sources: list[list[int]], device: torch.device):
        closer_of, is_closer, is_word = _token_classes(vocab)
        self.closer_of, self.is_closer = closer_of.to(device), is_closer.to(device)
        self.is_word = is_word.to(device)
        self.eos = vocab.eos
        # Each source's words: its pieces that start a word.
        counts = [sum(p.startswith(WORD_START) for p in vocab.pieces(ids)) for ids in sources]
        self.words = torch.tensor(counts, device=device)
        n = len(sources)
        self.sentence = torch.arange(n, device=device)  # the sentence of each row
        self.placed = torch.zeros(n, dtype=torch.long, device=device)
        self.depth = torch.zeros(n, dtype=torch.long, device=device)
        self.open = torch.full((n, 1), -1, dtype=torch.long, device=device)  # closers due
        self.rooted = torch.zeros(n, dtype=torch.bool, device=device)
        self.just_opened = torch.zeros(n, dtype=torch.bool, device=device)

    def restrict(self, log_probs: Tensor, room: Tensor) -> None:
        """Mask, in place, what no tree can take next; `room` (N,) is each row's tokens left
        before the end must come."""
        remaining = self.words[self.sentence] - self.placed
        inside = self.depth > 0
        can_open = (remaining > 0) & (inside | ~self.rooted)
        can_open &= remaining + self.depth + 1 <= room - 1  # it, its words, every closer
        can_place = (remaining > 0) & inside
        can_close = inside & ~self.just_opened & ((self.depth > 1) | (remaining == 0))
        allowed = torch.zeros_like(log_probs, dtype=torch.bool)
        allowed[:, self.closer_of >= 0] = can_open[:, None]
        allowed[:, self.is_word] = can_place[:, None]
        rows = can_close.nonzero().flatten()
        due = self.open[rows, self.depth[rows] - 1]
        allowed[rows, due] = True
        allowed[:, self.eos] = self.rooted & ~inside
        allowed[~allowed.any(dim=1)] = True  # no tree fits: leave the row to the search
        log_probs.masked_fill_(~allowed, float("-inf"))

    def reorder(self, rows: Tensor) -> None:
        """Rows follow the search's hypotheses: keep `rows`, in that order."""
        for name in ("sentence", "placed", "depth", "open", "rooted", "just_opened"):
            setattr(self, name, getattr(self, name)[rows])

    def advance(self, tokens: Tensor) -> None:
        """Each row takes its next token."""
        closer = self.closer_of[tokens]
        opens = closer >= 0
        if bool(opens.any()):
            if int(self.depth.max()) + 1 > self.open.size(1):  # a deeper tree: widen the stack
                wider = torch.full_like(self.open, -1)
                self.open = torch.cat([self.open, wider], dim=1)
            rows = opens.nonzero().flatten()
            self.open[rows, self.depth[rows]] = closer[rows]
        self.depth = (self.depth + opens.long() - self.is_closer[tokens].long()).clamp_(min=0)
        self.placed += self.is_word[tokens].long()
        self.rooted |= opens
        self.just_opened = opens


@functools.lru_cache(maxsize=4)
def _token_classes(vocab: Vocab) -> tuple[Tensor, Tensor, Tensor]:
    """Once per vocabulary, not per batch: for each token, its closer if it opens a bracket
    (else -1), whether it closes one, and whether it is the placeholder."""
    labels = [piece.removeprefix(WORD_START) for piece in vocab.pieces(list(range(vocab.size)))]
    closer_ids = {label[1:]: i for i, label in enumerate(labels) if label.startswith(")")}
    closer_of = torch.tensor(
        [closer_ids.get(label[1:], -1) if label.startswith("(") else -1 for label in labels]
    )
    is_word = torch.tensor([label == PLACEHOLDER for label in labels])
    if not bool(is_word.any()):
        raise ValueError(f"constrained search needs the {PLACEHOLDER} placeholder piece")
    return closer_of, torch.tensor([label.startswith(")") for label in labels]), is_word
