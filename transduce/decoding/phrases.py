"""Each hypothesis's progress through phrases, one step a token: what terms (must hold,
`decoding/terms.py`) and avoided phrases (must not, `decoding/avoid.py`) share.

A phrase is an automaton over tokens: its `keys` (the tokens that move it) and, for each
progress and key, the progress after it; any other token resets progress to 0. A phrase of
tokens (the vocabulary's encoding of a term, or ids given) is the automaton of Knuth, Morris
and Pratt over them; a phrase followed by its characters (`decoding/spelling.py`: a term in
running text of a script without spaces) has for keys the pieces holding its characters.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from .terms import Terms


def contains(tokens: Sequence[int], phrase: Sequence[int], glued: set[int] = frozenset()) -> bool:
    """Whether `phrase` occurs in `tokens`, not followed by a token of `glued`."""
    n, tokens, phrase = len(phrase), list(tokens), list(phrase)
    return any(tokens[i : i + n] == phrase and (i + n == len(tokens) or tokens[i + n] not in glued)
               for i in range(len(tokens) - n + 1))  # fmt: skip


@functools.lru_cache(maxsize=4096)
def borders(phrase: tuple | str) -> list[int]:
    """border[i]: the length of the longest proper start of phrase[: i + 1] that ends it."""
    border = [0] * len(phrase)
    for i in range(1, len(phrase)):
        k = border[i - 1]
        while k and phrase[i] != phrase[k]:
            k = border[k - 1]
        border[i] = k + (phrase[i] == phrase[k])
    return border


@functools.lru_cache(maxsize=4096)
def _transitions(phrase: tuple[int, ...], width: int) -> list[list[int]]:
    """For each progress p (tokens of the phrase matched) and each position j of the phrase:
    the progress after the token phrase[j] comes, the longest start of the phrase that ends the
    matched text (a mismatch need not lose everything: "a a b" after "a a a"). The automaton
    of Knuth, Morris and Pratt: after a mismatch at p, what the longest start of the phrase
    that ends its first p tokens would do; after the whole phrase, as after its longest
    border (an avoided phrase may come again: "a a" after "a a" then "a"). Rows past the
    phrase's length are 0."""
    n, border = len(phrase), borders(phrase)
    table = [[0] * width for _ in range(width + 1)]
    for p in range(n):
        for j in range(n):
            if phrase[p] == phrase[j]:
                table[p][j] = p + 1
            elif p:
                table[p][j] = table[border[p - 1]][j]
    for j in range(n if n else 0):  # after the whole phrase: as after its longest border
        table[n][j] = table[border[n - 1]][j]
    return table


class PhraseTables:
    """Phrases of each sentence of a search (terms' `TermConstraint`; an avoid list, the same
    for every sentence, lays its automata out by key tokens, `decoding/avoid.py`), and each
    row's progress through them: `keys` (S, C, R) each phrase's tokens that move it (-1:
    none), `step_to` (S, C, W + 3, R) the progress after key r from progress p, the rows
    following the search's hypotheses. Progress `lengths` is a phrase met at the token's end;
    one more, met inside a token; the last row, the step from nothing after a piece ending in
    a spaced script's letter (`after_word`: a phrase starting such a word may not start
    there)."""

    def __init__(self, terms: Sequence[Terms], device: torch.device):
        # One table a distinct Terms object: an avoid list is every sentence's, built once.
        table_of: dict[int, int] = {}
        of_sentence = [table_of.setdefault(id(t), len(table_of)) for t in terms]
        distinct = list({id(t): t for t in terms}.values())
        self.highest = max((token for t in distinct for p in t.phrases for token in p), default=0)
        if min((token for t in distinct for p in t.phrases for token in p), default=0) < 0:
            raise ValueError("a phrase's token ids must be >= 0")
        automata = [[phrase_automaton(t, c) for c in range(len(t.phrases))] for t in distinct]
        count = max(1, max(len(t.phrases) for t in distinct))
        width = max((len(rows) - 2 for each in automata for _, rows, _, _, _ in each), default=1)
        keys = max((len(k) for each in automata for k, _, _, _, _ in each), default=1)
        self.keys = torch.full((len(distinct), count, max(1, keys)), -1, dtype=torch.long)
        small = torch.int16 if width < torch.iinfo(torch.int16).max - 1 else torch.long
        self.step_to = torch.zeros(len(distinct), count, max(1, width) + 3, self.keys.size(2),
                                   dtype=small)  # fmt: skip
        self.blocked_row = self.step_to.size(2) - 1
        self.lengths = torch.zeros(len(distinct), count, dtype=torch.long)  # 0: none, met
        self.whole = torch.zeros(len(distinct), count, dtype=torch.bool)
        for s, sentence_automata in enumerate(automata):
            for c, (phrase_keys, rows, blocked, _, _) in enumerate(sentence_automata):
                self.keys[s, c, : len(phrase_keys)] = torch.tensor(phrase_keys, dtype=torch.long)
                table = torch.tensor(rows, dtype=torch.long).view(len(rows), -1)
                self.step_to[s, c, : table.size(0), : table.size(1)] = table
                self.step_to[s, c, -1, : table.size(1)] = torch.tensor(blocked, dtype=torch.long)
                self.lengths[s, c] = len(rows) - 2
                self.whole[s, c] = distinct[s].whole[c]
        self._index_keys()
        self.keys, self.step_to = self.keys.to(device), self.step_to.to(device)
        self.codes, self.columns = self.codes.to(device), self.columns.to(device)
        self.lengths, self.whole = self.lengths.to(device), self.whole.to(device)
        glue = next((t.glue for t in terms if t.glue is not None), None)
        self.glues = None if glue is None else glue.to(device)  # (V,)
        self.glued = set() if glue is None else set(glue.nonzero().flatten().tolist())
        ends = next((t.word_ends for t in terms if t.word_ends is not None), None)
        self.word_ends = None if ends is None else ends.to(device)  # (V,)
        self.after_word = torch.zeros(len(terms), dtype=torch.bool, device=device)
        self.sentence = torch.tensor(of_sentence, device=device)  # each row's table
        self.progress = torch.zeros(len(terms), count, dtype=torch.long, device=device)
        self.phrase = torch.arange(count, device=device)

    def _index_keys(self) -> None:
        """Each (table, phrase, key) as one number, sorted, to find a token's column among a
        phrase's keys by binary search: a scan of every key would grow with their count, which
        is hundreds for a term followed by its characters. `span`: the tokens a code spans."""
        self.span = max(self.highest, int(self.keys.max())) + 1
        table, phrase, column = (self.keys >= 0).nonzero(as_tuple=True)
        codes = (table * self.keys.size(1) + phrase) * self.span + self.keys[table, phrase, column]
        codes, order = codes.sort(stable=True)  # a repeated key: its first column first
        self.codes = torch.cat([torch.tensor([-1]), codes])  # -1: none matches it
        self.columns = torch.cat([torch.tensor([0]), column[order]])

    def check_within(self, vocabulary: int) -> None:
        """ValueError for a phrase's token id past the vocabulary (ids handed to the search
        directly; text is encoded within it): named at the first step, where on a GPU indexing
        with it would be a device-side assert."""
        if self.highest >= vocabulary:
            raise ValueError(f"a phrase's token id {self.highest} is past the model's "
                             f"{vocabulary}-token vocabulary")  # fmt: skip
        self.highest = -1  # checked: once a search

    def _moved(self, rows: Tensor, tokens: Tensor) -> Tensor:
        """(N, C) each phrase's progress after row `rows[i]` takes `tokens[i]`, by the tables
        alone (from a phrase's whole length: as from its longest border)."""
        sentence, progress = self.sentence[rows], self._state(rows)
        code = (sentence[:, None] * self.keys.size(1) + self.phrase) * self.span + tokens[:, None]
        at = torch.searchsorted(self.codes, code).clamp(max=self.codes.numel() - 1)  # (N, C)
        found = (self.codes[at] == code) & (tokens < self.span)[:, None]
        moved = self.step_to[sentence[:, None], self.phrase, progress, self.columns[at]]
        return moved.long().masked_fill(~found, 0)

    def _steps(self) -> Tensor:
        """(N, C, R) each row's progress through each phrase after each of the phrase's keys."""
        rows = torch.arange(self.progress.size(0), device=self.progress.device)
        return self.step_to[self.sentence[:, None], self.phrase, self._state(rows)]

    def _state(self, rows: Tensor) -> Tensor:
        """(N, C) the table row of each phrase for `rows`: its progress, or the blocked row."""
        progress = self.progress[rows]
        blocked = (progress == 0) & self.after_word[rows][:, None]
        return progress.masked_fill(blocked, self.blocked_row)


def phrase_automaton(
    terms: Terms, c: int
) -> tuple[list[int], list[list[int]], list[int], list[list[int]] | None, int]:
    """Phrase c's keys, its table (a row for each progress 0 .. its length + 1), the step from
    nothing after a spaced script's letter (`Spelling.blocked`; else row 0), for a spelled one
    the progress after the whole of each key (`Spelling.resume`; a phrase of tokens is met only
    at a token's end), and the longest border of the whole."""
    spelled = terms.spelled[c]
    if spelled is not None:
        rows, resume = [list(row) for row in spelled.steps], [list(r) for r in spelled.resume]
        blocked = list(spelled.blocked) or rows[0]
        return list(spelled.keys), rows, blocked, resume, borders(spelled.text)[-1]
    phrase = terms.phrases[c]
    rows = _transitions(phrase, len(phrase))
    return list(phrase), [*rows, [0] * len(phrase)], rows[0], None, borders(phrase)[-1]
