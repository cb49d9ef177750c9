"""Sub-words back into words, for attention maps and alignments read at the word level.

Sentencepiece marks the first piece of each word with "▁"; BOS, EOS and padding are words of
their own. Merging a map sums the weights over the pieces of a key word (how much the query
attends to that word) and averages them over the pieces of a query word (each piece is one
query), so every merged row is still a distribution over the keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

WORD_START = "▁"
SPECIALS = ("<s>", "</s>", "<pad>", "<unk>")


@dataclass(frozen=True)
class Words:
    """How the pieces of one sequence group into words."""

    labels: list[str]  # one per word, "▁" removed
    groups: list[list[int]]  # the piece positions of each word, in order

    @property
    def n_pieces(self) -> int:
        return sum(len(group) for group in self.groups)


def group_pieces(pieces: list[str]) -> Words:
    """Words from sub-word pieces: a piece that does not start with "▁" joins the word before.

    >>> group_pieces(["▁a", "▁do", "g", "</s>"]).labels
    ['a', 'dog', '</s>']
    """
    labels: list[str] = []
    groups: list[list[int]] = []
    for i, piece in enumerate(pieces):
        joins = (
            groups
            and not piece.startswith(WORD_START)
            and piece not in SPECIALS
            and labels[-1] not in SPECIALS
        )
        if joins:
            groups[-1].append(i)
            labels[-1] += piece
        else:
            groups.append([i])
            labels.append(piece.removeprefix(WORD_START) if piece not in SPECIALS else piece)
    return Words(labels, groups)


def identity_words(pieces: list[str]) -> Words:
    """Each piece a word of its own (no merging), labels as the pieces are written."""
    return Words(list(pieces), [[i] for i in range(len(pieces))])


def merge_weights(weights: Tensor, queries: Words, keys: Words) -> Tensor:
    """(..., Tq, Tk) piece weights -> (..., words(queries), words(keys)).

    Sums over the pieces of each key word, averages over the pieces of each query word.
    """
    dtype, device = weights.dtype, weights.device
    key_sum = torch.zeros(keys.n_pieces, len(keys.groups), dtype=dtype, device=device)
    for j, group in enumerate(keys.groups):
        key_sum[group, j] = 1.0
    query_mean = torch.zeros(len(queries.groups), queries.n_pieces, dtype=dtype, device=device)
    for i, group in enumerate(queries.groups):
        query_mean[i, group] = 1.0 / len(group)
    return query_mean @ weights @ key_sum
