"""Decoding whose outputs do not contain given phrases: an avoid list (negative lexical
constraints, as Sockeye's `--avoid-list`). A client's banned word, a register not to use ("Sie"
where the text says "du"), a term a glossary replaces.

The same automaton as terms (`decoding/terms.py`) follows each hypothesis's progress through
each avoided phrase; the token that would complete one is ruled out. So the phrase's tokens, as
the vocabulary encodes it alone, never come in a row: "hund" ("▁hund") is avoided, and so is
"hund" + "e" (the model writes "hunde" as its own piece, "▁hunde", if it has one), and the
same word in other pieces ("▁hu" + "nd") is not caught, as with Sockeye's `--avoid-list`. A
rule that would leave a row no token at all (a forced prefix, or a term, that spells the
phrase) gives way: what was asked for wins over what is avoided.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..config import TaskConfig
from ..data.bpe import Vocab
from ..tasks.translation import TRANSLATION
from .phrases import PhraseTables, contains
from .terms import Both, Terms, of_ids, parse_terms

MAX_AVOIDED = 1000  # phrases: each row's progress through each is followed every step
MAX_AVOIDED_TOKENS = 16  # a phrase's subwords: its table grows with their square


def parse_avoided(vocab: Vocab, phrases: Sequence[str], task: TaskConfig = TRANSLATION) -> Terms:
    """The phrases to avoid as token ids, as terms are read (blank ones dropped, each once); a
    phrase with characters the vocabulary lacks is dropped too, since no output can hold it.
    ValueError for more than MAX_AVOIDED and for a model of another task."""
    if isinstance(phrases, str):
        raise TypeError("avoid: a list of phrases, not one string")
    texts = list(dict.fromkeys(" ".join(p.split()) for p in phrases if p.strip()))
    if not texts:
        return Terms()
    if len(texts) > MAX_AVOIDED:
        raise ValueError(f"{len(texts)} phrases to avoid: at most {MAX_AVOIDED}")
    if task.name != "translation":
        raise ValueError(f"an avoid list is for translation, not for a {task.name} model")
    writable = [t for t in texts if not vocab.lacking(c for c in t if not c.isspace())]
    if not writable:
        return Terms()
    avoided = _all_in_one(parse_terms(vocab, [[t] for t in writable], task))
    for text, phrase in zip(writable, avoided.phrases, strict=True):
        if len(phrase) > MAX_AVOIDED_TOKENS:
            raise ValueError(f"the avoided {text[:40]!r} has {len(phrase)} subwords: at most "
                             f"{MAX_AVOIDED_TOKENS}")  # fmt: skip
    return avoided


def check_terms(avoided: Terms, terms: Sequence[Terms], vocab: Vocab) -> None:
    """ValueError for a line's term that holds an avoided phrase: no output could do both."""
    for number, line in enumerate(terms, start=1):
        for phrase in line.phrases:
            for banned in (b for b in avoided.phrases if contains(phrase, b)):
                term, avoided_text = vocab.decode([phrase, banned])
                raise ValueError(f"line {number}: the term {term!r} holds the avoided "
                                 f"{avoided_text!r}")  # fmt: skip


def _all_in_one(each: list[Terms]) -> Terms:
    """One Terms of every phrase, each as its tokens (a glued one in the pieces a sentence
    holds it in; its other spellings are not followed: the tables would grow with every piece
    holding its characters, a thousand phrases over)."""
    return Terms(tuple(p for t in each for p in t.phrases), tuple(w for t in each for w in t.whole),
                 each[0].glue)  # fmt: skip


class AvoidConstraint(PhraseTables):
    """Every row's progress through every avoided phrase (the same for each sentence)."""

    def __init__(self, avoided: Terms, sentences: int, eos: int, device: torch.device):
        super().__init__([avoided] * sentences, device)
        self.eos = eos

    def restrict(self, log_probs: Tensor, room: Tensor) -> None:
        """Rule out each token that would complete an avoided phrase, unless a row would be
        left with nothing."""
        self.check_within(log_probs.size(1))
        lengths = self.lengths[self.sentence]
        rows, phrases = ((self.progress == lengths - 1) & (lengths > 0)).nonzero(as_tuple=True)
        if not rows.numel():
            return
        # An avoided phrase is one of tokens (its keys are its tokens): its last one completes it.
        last = self.keys[self.sentence[rows], phrases, lengths[rows, phrases] - 1]
        kept = log_probs[rows, last]
        log_probs[rows, last] = float("-inf")
        stuck = log_probs.amax(dim=1) == float("-inf")  # nothing left: give the row its tokens
        if bool(stuck.any()):
            back = stuck[rows]
            log_probs[rows[back], last[back]] = kept[back]

    def reorder(self, rows: Tensor) -> None:
        self.sentence, self.progress = self.sentence[rows], self.progress[rows]

    def advance(self, tokens: Tensor) -> None:
        """Each row takes its token; a phrase it completes (the rule gave way) is followed on
        from its longest border, so that the next completion is ruled out in turn."""
        progress = self._moved(torch.arange(tokens.numel(), device=tokens.device), tokens)
        lengths = self.lengths[self.sentence]
        whole = (progress >= lengths) & (lengths > 0)
        self.progress = torch.where(whole, self.border[self.sentence], progress)


def with_avoided(avoided: Terms | Sequence[Sequence[int]] | None, constraint, sentences: int,
                 eos: int, device: torch.device):  # fmt: skip
    """The search's constraint with the avoid list's added (token-id phrases: avoided as
    tokens, not words)."""
    if avoided is None:
        return constraint
    if not isinstance(avoided, Terms):
        avoided = of_ids(avoided)
    if not avoided:
        return constraint
    state = AvoidConstraint(avoided, sentences, eos, device)
    return state if constraint is None else Both(constraint, state)
