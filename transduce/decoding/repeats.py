"""Decoding without repeated n-grams: no output holds the same n tokens in a row twice.

A small or undertrained model can fall into a loop ("ein mann mit einem mann mit einem mann
...", "まけんんんん...") that the search follows to its length limit: each of the loop's tokens
is likely given the ones before it. fairseq's `--no-repeat-ngram-size` and CTranslate2's
`no_repeat_ngram_size` rule such continuations out, as Paulus et al. (2018) did for
summaries: at each step, a token that would complete an n-gram its hypothesis already holds is
not a candidate. Off by default, as in the paper's search: a good model seldom loops, and a
rule of n = 2 also forbids a fair repeat ("a man and a man's dog"); 3 or 4 is usual.

What was asked for wins over the rule: a token that takes a term the row has not met further
is never ruled out (a looping model's only way to its term may repeat a phrase), and a row the
rule would leave no token at all (a forced prefix that repeats itself) keeps its tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .constraints import Constraint, rule_out
from .terms import Both, TermConstraint

NO_REPEATS_IN_TREES = "no_repeat_ngram is for translation: a parser's trees repeat their brackets"


class NoRepeat:
    """Each row's tokens so far, and the rule on its next one: no n-gram twice."""

    def __init__(self, size: int, rows: int, device: torch.device, terms: TermConstraint | None):
        if isinstance(size, bool) or not (isinstance(size, int) and size >= 1):
            raise ValueError(f"no_repeat_ngram={size!r}: n-grams of at least 1 token (0: off)")
        self.size, self.terms = size, terms
        self.history = torch.zeros(rows, 0, dtype=torch.long, device=device)

    def restrict(self, log_probs: Tensor, room: Tensor) -> None:
        """Rule out each token that would complete an n-gram its row already holds, unless it
        takes an unmet term further or the row would be left with nothing."""
        rows, tokens = self.repeating()
        if self.terms is not None and rows.numel():
            advancing = self.terms.advancing()  # (N, K): tokens that take a term further
            asked = (advancing[rows] == tokens[:, None]).any(dim=1)
            rows, tokens = rows[~asked], tokens[~asked]
        rule_out(log_probs, rows, tokens)

    def repeating(self) -> tuple[Tensor, Tensor]:
        """(rows, tokens): the tokens each row may not take next, a pair each (pairs repeat
        where an n-gram does). A row's earlier n-grams whose first n - 1 tokens are its last
        n - 1 tokens: their last tokens."""
        n, written = self.size, self.history.size(1)
        if written < n:  # no whole n-gram yet, or none before the last n - 1 tokens
            empty = self.history.new_zeros(0)
            return empty, empty
        grams = self.history.unfold(1, n, 1)  # (N, written - n + 1, n)
        latest = self.history[:, written - n + 1 :]  # (N, n - 1)
        same_start = (grams[:, :, :-1] == latest[:, None, :]).all(dim=2)
        rows, at = same_start.nonzero(as_tuple=True)
        return rows, grams[rows, at, -1]

    def reorder(self, rows: Tensor) -> None:
        self.history = self.history[rows]

    def advance(self, tokens: Tensor) -> None:
        self.history = torch.cat([self.history, tokens[:, None]], dim=1)


def with_no_repeat(
    size: int,
    constraint: Constraint | None,
    rows: int,
    device: torch.device,
    terms: TermConstraint | None = None,
) -> Constraint | None:
    """The search's constraint with the rule against repeated `size`-grams added (0: none);
    `terms`: the search's terms, whose advancing tokens the rule lets through."""
    if size == 0 and not isinstance(size, bool):  # False is refused, not taken for 0
        return constraint
    state = NoRepeat(size, rows, device, terms)
    return state if constraint is None else Both(constraint, state)
