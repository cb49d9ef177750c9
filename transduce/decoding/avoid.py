"""Decoding whose outputs do not contain given phrases: an avoid list (negative lexical
constraints, as Sockeye's `--avoid-list`). A client's banned word, a register not to use ("Sie"
where the text says "du"), a term a glossary replaces.

The same automata as terms (`decoding/phrases.py`) follow each hypothesis's progress through
each avoided phrase; each token that would complete one is ruled out. A phrase of a spaced
script is its tokens as the vocabulary encodes it alone (a word is encoded alike wherever it
stands): "hund" ("▁hund") is avoided, and so is "hund" + "e" (the model writes "hunde" as its
own piece, "▁hunde", if it has one), and an unusual segmentation of the word ("▁hu" + "nd") is
not caught, as with Sockeye's `--avoid-list`. A phrase in running text of a script without
spaces is followed by its characters (`decoding/spelling.py`), in any pieces: "犬" is avoided
in "犬が", "▁その犬は" and "子" + "犬" alike. A rule that would leave a row no token at all (a
forced prefix, or a term, that spells the phrase) gives way: what was asked for wins over what
is avoided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import Tensor

from ..config import TaskConfig
from ..data.bpe import Vocab
from ..tasks.translation import TRANSLATION
from .constraints import rule_out
from .phrases import contains, phrase_automaton
from .spelling import spelling
from .terms import Both, Terms, of_ids, parse_terms

MAX_AVOIDED = 1000  # phrases: each row's progress through each is followed every step
MAX_AVOIDED_TOKENS = 16  # a phrase's subwords


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
    # Characters are ruled out wherever they come, a letter after them or not ("トムのcat" in
    # "トムのcats"), as tokens are ("hund" + "e"): no whole words among avoided phrases.
    spelled = tuple(s and spelling(vocab, s.text, False) for s in avoided.spelled)
    avoided = replace(avoided, spellings=spelled)
    for text, phrase in zip(writable, avoided.phrases, strict=True):
        if len(phrase) > MAX_AVOIDED_TOKENS:
            raise ValueError(f"the avoided {text[:40]!r} has {len(phrase)} subwords: at most "
                             f"{MAX_AVOIDED_TOKENS}")  # fmt: skip
    return avoided


def check_terms(avoided: Terms, terms: Sequence[Terms], vocab: Vocab) -> None:
    """ValueError for a line's term that holds an avoided phrase (its tokens, or its characters
    where it is followed by them): no output could do both."""
    for number, line in enumerate(terms, start=1):
        for phrase in line.phrases:
            for banned, spelled in zip(avoided.phrases, avoided.spelled, strict=True):
                if spelled.held(phrase) if spelled else contains(phrase, banned):
                    term, avoided_text = vocab.decode([phrase, banned])
                    raise ValueError(f"line {number}: the term {term!r} holds the avoided "
                                     f"{avoided_text!r}")  # fmt: skip


def with_unknown_avoided(avoided: Terms | None, unk: int) -> Terms:
    """The avoid list with the unknown token added (`decode.no_unk`): no output writes " ⁇ "
    where the model's vocabulary lacks a character; it writes what it finds likeliest else."""
    unknown = Terms(((unk,),), (False,))
    return _all_in_one([avoided, unknown]) if avoided else unknown


def _all_in_one(each: list[Terms]) -> Terms:
    """One Terms of every phrase."""
    return Terms(tuple(p for t in each for p in t.phrases), tuple(w for t in each for w in t.whole),
                 each[0].glue, tuple(s for t in each for s in t.spelled))  # fmt: skip


class AvoidConstraint:
    """Every row's progress through every avoided phrase (the same for each sentence). The
    tables scale with the phrases' keys, not with phrases times keys: a thousand phrases of
    running Japanese, each with tens to hundreds of pieces holding its characters, are cheap
    to follow. `arc_of[k, c]`: the arc of key token k (`row_of` maps a token to k) of phrase c;
    `step[a, p]` the progress after arc a from progress p; `finish[c, p]`: the tokens that
    complete phrase c from progress p > 0; `always`: those completing one from nothing."""

    def __init__(self, avoided: Terms, sentences: int, eos: int, device: torch.device):
        automata = [phrase_automaton(avoided, c) for c in range(len(avoided.phrases))]
        tokens = [key for keys, _, _, _, _ in automata for key in keys]
        if min(tokens, default=0) < 0:
            raise ValueError("a phrase's token ids must be >= 0")
        self.highest, self.eos = max(tokens, default=0), eos
        distinct = sorted(set(tokens))
        self.row_of = torch.full((self.highest + 1,), -1, dtype=torch.long)
        self.row_of[distinct] = torch.arange(len(distinct))
        arc_tokens, arc_phrases, steps, resume, finish, always = _arcs(automata)
        self.arc_of = torch.full((len(distinct), len(automata)), -1, dtype=torch.int32)
        self.arc_of[self.row_of[arc_tokens], arc_phrases] = torch.arange(
            len(steps), dtype=torch.int32
        )
        self.step, self.resume = torch.tensor(steps), torch.tensor(resume)
        self.finish, self.always = finish, torch.tensor(sorted(always), dtype=torch.long)
        self.lengths = torch.tensor([len(rows) - 2 for _, rows, _, _, _ in automata])
        for name in ("row_of", "arc_of", "step", "resume", "finish", "always", "lengths"):
            setattr(self, name, getattr(self, name).to(device))
        self.progress = torch.zeros(sentences, len(automata), dtype=torch.long, device=device)

    def restrict(self, log_probs: Tensor, room: Tensor) -> None:
        """Rule out each token that would complete an avoided phrase, unless a row would be
        left with nothing."""
        if self.highest >= log_probs.size(1):
            raise ValueError(f"a phrase's token id {self.highest} is past the model's "
                             f"{log_probs.size(1)}-token vocabulary")  # fmt: skip
        before_always = log_probs[:, self.always]  # (N, A): what a stuck row gets back
        log_probs[:, self.always] = float("-inf")
        rows, phrases = (self.progress > 0).nonzero(as_tuple=True)
        completing = self.finish[phrases, self.progress[rows, phrases]]  # (P, F)
        hit = completing >= 0
        rows, completing = rows[:, None].expand_as(completing)[hit], completing[hit]
        stuck = rule_out(log_probs, rows, completing)  # nothing left: the row gets its tokens
        if bool(stuck.any()):
            log_probs[stuck.nonzero(), self.always] = before_always[stuck]

    def reorder(self, rows: Tensor) -> None:
        self.progress = self.progress[rows]

    def advance(self, tokens: Tensor) -> None:
        """Each row takes its token; a phrase it completes (the rule gave way) is followed on
        from what the token leaves of it (the phrase's longest border, or what a piece holding
        it ends with), so that the next completion is ruled out in turn."""
        key = self.row_of[tokens.clamp(max=self.row_of.numel() - 1)]
        key = torch.where(tokens < self.row_of.numel(), key, -1)
        arc = self.arc_of[key.clamp(min=0)].masked_fill((key < 0)[:, None], -1)  # (N, C)
        none, arc = arc < 0, arc.clamp(min=0)  # a token no key of the phrase: back to nothing
        moved = self.step[arc, self.progress].masked_fill(none, 0)
        resumed = self.resume[arc, self.progress]
        self.progress = torch.where(moved >= self.lengths, resumed, moved)


def _arcs(automata: list) -> tuple[list[int], list[int], list, list, Tensor, set[int]]:
    """The phrases' arcs (a key of a phrase: its token, its phrase, its progress from each
    progress, and the progress at the token's end once the phrase is met: from the phrase's
    border); for each phrase and progress > 0 the tokens that complete it (C, W, F); and those
    that complete one from nothing."""
    width = max(len(rows) for _, rows, _, _, _ in automata)  # a phrase's length + 2 at most
    arc_tokens, arc_phrases, steps, resume, finish, always = [], [], [], [], [], set()
    for c, (keys, rows, _, resumed, border) in enumerate(automata):
        length, padding = len(rows) - 2, [0] * (width - len(rows))
        arc_tokens += keys
        arc_phrases += [c] * len(keys)
        steps += [[row[r] for row in rows] + padding for r in range(len(keys))]
        resumed = resumed or [[border] * len(keys)] * len(rows)  # tokens: met at their end
        resume += [[border if row[r] >= length else row[r] for row in resumed] + padding
                   for r in range(len(keys))]  # fmt: skip
        done = [[k for r, k in enumerate(keys) if row[r] >= length] for row in rows[:length]]
        always.update(done[0])
        finish.append(done)
    most = max((len(d) for done in finish for d in done[1:]), default=0)
    completing = torch.full((len(automata), width, max(most, 1)), -1, dtype=torch.long)
    for c, done in enumerate(finish):
        for p, tokens in enumerate(done[1:], start=1):
            completing[c, p, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    return arc_tokens, arc_phrases, steps, resume, completing, always


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
