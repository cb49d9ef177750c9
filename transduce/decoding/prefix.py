"""Decoding that continues a given start of the output: each hypothesis's first tokens forced.

Interactive translation works this way (Knowles and Koehn 2016; Wuebker et al. 2016): a
translator accepts or types the start of the translation and the model completes it, the best
completion given that start, which the model's own best translation need not begin with. So
does fairseq's `--prefix-size` and CTranslate2's `target_prefix`. Search runs as before, but
while a hypothesis is inside its prefix, every token but the prefix's next one is ruled out (a
`Constraint`, as constrained parsing's). The forced tokens keep the model's probabilities: a
completed hypothesis's log-probability is that of its whole output, prefix included, the number
`transduce score` gives the same pair, and its text includes the prefix.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..data.bpe import Vocab
from .constraints import Constraint


class PrefixConstraint:
    """Each row's prefix (token ids, possibly none), forced one token a step from the first."""

    def __init__(self, prefixes: list[list[int]], device: torch.device):
        width = max((len(prefix) for prefix in prefixes), default=0)
        self.tokens = torch.full((len(prefixes), width), -1, dtype=torch.long)  # -1: none due
        for row, prefix in enumerate(prefixes):
            self.tokens[row, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
        self.tokens = self.tokens.to(device)
        self.lengths = torch.tensor([len(prefix) for prefix in prefixes], device=device)
        self.step = 0  # tokens generated so far: the same for every row of a search

    def restrict(self, log_probs: Tensor, room: Tensor) -> None:
        """In place: a row inside its prefix keeps the log-probability of the prefix's next
        token and rules out every other. (`room` is the search's; the limit allows for the
        prefix, `with_prefixes`.)"""
        if self.step >= self.tokens.size(1):
            return  # every prefix is behind the search
        due = self.tokens[:, self.step]
        rows = (due >= 0).nonzero().flatten()
        if rows.numel() == 0:
            return
        forced = log_probs[rows, due[rows]]
        log_probs[rows] = float("-inf")
        log_probs[rows, due[rows]] = forced

    def reorder(self, rows: Tensor) -> None:
        """Rows follow the search's hypotheses: keep `rows`, in that order."""
        self.tokens = self.tokens[rows]

    def advance(self, tokens: Tensor) -> None:
        self.step += 1


def with_prefixes(
    prefixes: list[list[int]] | None, constraint: Constraint | None, limit: Tensor
) -> tuple[Constraint | None, Tensor]:
    """The search's constraint and length limits (B,) with each sentence's prefix forced: a
    limit shorter than the prefix and its EOS is raised to that (the prefix is the caller's
    to keep within the model's positions)."""
    if prefixes is None:
        return constraint, limit
    if constraint is not None:
        raise ValueError("a prefix with constrained parsing is not supported: give one of them")
    if len(prefixes) != limit.numel():
        raise ValueError(f"{len(prefixes)} prefixes for {limit.numel()} sentences: give one each")
    forced = PrefixConstraint(prefixes, limit.device)
    return forced, torch.maximum(limit, forced.lengths + 1)


def prefix_ids(vocab: Vocab, prefixes: list[str]) -> list[list[int]]:
    """Each prefix's ids ('' none); ValueError for one with characters the vocabulary lacks,
    since no output could start with it."""
    ids = vocab.encode([prefix.strip() for prefix in prefixes])
    for line, (prefix, pieces) in enumerate(zip(prefixes, ids, strict=True), start=1):
        if vocab.unk in pieces:
            lacking = "".join(vocab.lacking(prefix))
            raise ValueError(f"prefix {line}: the model's vocabulary lacks {lacking!r}, so no "
                             "output of it can start so")  # fmt: skip
    return ids
