"""Decoding whose outputs contain given phrases: terminology, lexically constrained decoding.

A translator often knows how a term must come out (a client's glossary, a product's name, the
word a document has used so far) and the model does not. Masking cannot say "somewhere in the
output", so the search itself changes, as in dynamic beam allocation (Post and Vilar 2018,
fairseq's `--constraints` after Hu et al. 2019):

- each hypothesis tracks, for every phrase of its sentence, how many of the phrase's tokens its
  latest tokens have matched (a phrase once met stays met, unless a piece glues onto the word
  it ends); it may end only when all are met. A term in running text of a script without
  spaces is followed by its characters (`decoding/spelling.py`): BPE segments such text by
  context ("▁私は", "私はこれ"), and any pieces that spell the term hold it;
- each step's candidates are the usual best extensions, plus, for every hypothesis, the next
  token of each phrase it has not met (begun or not; of a spelled one the likeliest piece that
  takes it further) and its own best token;
- a candidate's bank is the number of phrase tokens (a spelled one's characters) it has met;
  the beam is filled from the banks in turn, the most advanced first, each bank's candidates
  best first. A hypothesis that has placed a term is not pushed out by likelier ones that have
  not, and those stay in the beam beside it, so the term is placed where the model finds it
  fits best.

The tokens keep the model's probabilities: a hypothesis's log-probability is that of its whole
output, as `transduce score` gives it. A hypothesis that reaches the length limit ends, met or
not (the limit is raised to fit the phrases); the n best put those meeting every phrase first.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..config import TaskConfig
from ..data.bpe import Vocab
from ..tasks.translation import TRANSLATION, is_tokenized, writes_running_text
from ..writing import bounds_words, unspaced
from .constraints import WORD_START, Constraint
from .phrases import PhraseTables, contains
from .spelling import Spelling, glued, spelling

MAX_TERMS = 16  # phrases a sentence: the search widens by one candidate a phrase a hypothesis
# Characters of a term followed by its characters (`Spelling`): its tables grow with them times
# the pieces holding them; a longer one keeps the one spelling a sentence holds it in.
MAX_SPELLED = 32


@dataclass(frozen=True)
class Terms:
    """One sentence's phrases as token ids. `whole[i]`: phrase i ends a word, so a piece glued
    onto it does not meet it ("iglu" is no term in "igluft"); `glue` (V,) the pieces that glue
    (a letter, digit or mark of a spaced script that starts no word; of any script in
    pre-tokenized text). A phrase ending in a script written without spaces (Japanese, Chinese,
    Thai) may be followed by anything, unless the text is pre-tokenized. `spellings[i]`, where
    given and not None: phrase i is followed by its characters in any pieces (running text of a
    script without spaces), `phrases[i]` then one spelling of it; `word_ends` (V,) the pieces
    ending in a spaced script's letter, after which a spelled phrase starting a word of one
    ("AI技術") may not start."""

    phrases: tuple[tuple[int, ...], ...] = ()
    whole: tuple[bool, ...] = ()
    glue: Tensor | None = None
    spellings: tuple[Spelling | None, ...] = ()
    word_ends: Tensor | None = None

    def __bool__(self) -> bool:
        return bool(self.phrases)

    @property
    def spelled(self) -> tuple[Spelling | None, ...]:
        """Each phrase's `Spelling`, None for one followed by its tokens (all, if none given)."""
        return self.spellings or (None,) * len(self.phrases)

    @property
    def tokens(self) -> int:
        """The tokens its phrases take at most (each apart: they may share none; a spelled one
        a piece a character at most)."""
        return sum(len(phrase) if spelled is None else len(spelled.text)
                   for phrase, spelled in zip(self.phrases, self.spelled, strict=True))  # fmt: skip


def parse_terms(
    vocab: Vocab, lines: Sequence[Sequence[str]], task: TaskConfig = TRANSLATION
) -> list[Terms]:
    """Each line's phrases as token ids; blank phrases are dropped, a repeated one counted
    once. ValueError for a phrase with characters the vocabulary lacks (no output could hold
    it), more than MAX_TERMS phrases for a line, and a model of another `task`. A phrase is
    encoded as the model writes it: in running text of a script without spaces glued to the
    word before it, and held in any pieces that spell its characters (`Spelling`, up to
    MAX_SPELLED of them), as is any term of a model whose outputs are such text
    (`writes_running_text`: "iPhone" inside running Japanese); in pre-tokenized text
    (`is_tokenized`) a word of its own, in any script."""
    if task.name != "translation":
        raise ValueError(f"terms are for translation, not for a {task.name} model")
    parsed = []
    for number, phrases in enumerate(lines, start=1):
        if isinstance(phrases, str):
            raise TypeError(f"terms of line {number}: a list of phrases, not one string")
        texts = list(dict.fromkeys(" ".join(p.split()) for p in phrases if p.strip()))
        if len(texts) > MAX_TERMS:
            raise ValueError(f"line {number} has {len(texts)} terms: at most {MAX_TERMS}")
        for text in texts:
            if lacking := vocab.lacking(c for c in text if not c.isspace()):
                raise ValueError(f"term {text!r} of line {number}: the model's vocabulary "
                                 f"lacks {''.join(lacking)!r}: no output can hold it")  # fmt: skip
        encoded = vocab.encode(texts) if texts else []
        tokenized = is_tokenized(task)
        running = [not tokenized and unspaced(text[0]) for text in texts]
        running_target = writes_running_text(task)
        spelled = [not tokenized and len(text) <= MAX_SPELLED
                   and (running_target or any(map(unspaced, text))) for text in texts]  # fmt: skip
        phrases = tuple(
            glued(vocab, text, ids) if run else tuple(ids)
            for text, ids, run in zip(texts, encoded, running, strict=True)
        )
        whole = tuple(bounds_words(text[-1], tokenized) for text in texts)
        spellings = tuple(
            spelling(vocab, vocab.decode([ids])[0], ends, bounds_words(text[0])) if spell else None
            for text, ids, ends, spell in zip(texts, phrases, whole, spelled, strict=True)
        )
        glue, word_ends = _gluing(vocab, tokenized), _word_ending(vocab)
        parsed.append(Terms(phrases, whole, glue, spellings, word_ends))
    return parsed


@functools.lru_cache(maxsize=4)
def _word_ending(vocab: Vocab) -> Tensor:
    """(V,) the pieces that end in a letter or digit of a spaced script."""
    pieces = vocab.pieces(list(range(vocab.size)))
    return torch.tensor([bool(piece) and bounds_words(piece[-1]) for piece in pieces])


@functools.lru_cache(maxsize=4)
def _gluing(vocab: Vocab, tokenized: bool = False) -> Tensor:
    """(V,) the pieces that continue the word before them with a letter or digit (of a spaced
    script, or of any in pre-tokenized text)."""
    pieces = vocab.pieces(list(range(vocab.size)))
    specials = {vocab.pad, vocab.unk, vocab.bos, vocab.eos}
    return torch.tensor([i not in specials and not piece.startswith(WORD_START) and
                         bounds_words(piece[:1] or " ", tokenized)
                         for i, piece in enumerate(pieces)])  # fmt: skip


class TermConstraint(PhraseTables):
    """For each row of a search, its progress through each phrase of its sentence."""

    def __init__(self, terms: Sequence[Terms], eos: int, device: torch.device):
        super().__init__(terms, device)
        self.eos, self.terms = eos, list(terms)
        self.needed = self.lengths.sum(dim=1)[self.sentence]  # (B,) tokens to meet them all
        self.just_met = torch.zeros_like(self.progress, dtype=torch.bool)

    def restrict(self, log_probs: Tensor, room: Tensor) -> None:
        """A row may end only once it has met every phrase (at its length limit it must end
        all the same: the search forces that after), and a phrase it has just met ends a word
        unless the row can do nothing else (a prefix that goes on spelling it, "dogs" for
        "dog": then the phrase is undone and to be met again)."""
        self.check_within(log_probs.size(1))
        unmet = (self.progress < self.lengths[self.sentence]).any(dim=1)
        log_probs[unmet & (room > 0), self.eos] = float("-inf")
        if self.glues is not None and bool(self.just_met.any()):
            rows = self.just_met.any(dim=1).nonzero().flatten()
            ended = log_probs[rows].masked_fill(self.glues, float("-inf"))
            can = (ended > float("-inf")).any(dim=1)
            log_probs[rows[can]] = ended[can]

    def reorder(self, rows: Tensor) -> None:
        self.sentence, self.progress = self.sentence[rows], self.progress[rows]
        self.just_met, self.after_word = self.just_met[rows], self.after_word[rows]

    def advance(self, tokens: Tensor) -> None:
        rows = torch.arange(tokens.numel(), device=tokens.device)
        progress = self._progressed(rows, tokens)
        lengths = self.lengths[self.sentence]
        fresh = self.progress < lengths
        if self.glues is not None:  # undone by a glue piece that meets it again at its end
            fresh |= self.just_met & self.glues[tokens][:, None]
        met_now = (progress == lengths) & fresh & self.whole[self.sentence]
        self.progress, self.just_met = progress, met_now
        if self.word_ends is not None:
            self.after_word = self.word_ends[tokens]

    def _progressed(self, rows: Tensor, tokens: Tensor) -> Tensor:
        """(N, C) each phrase's progress after row `rows[i]` takes `tokens[i]`. A met phrase
        stays met, unless the token glues onto a phrase met just before, which ends a word:
        "Hund" then "e" is "Hunde", no term "Hund", and the phrase is to be met again, from
        where that token leaves it."""
        progress, moved = self.progress[rows], self._moved(rows, tokens)
        kept = torch.where(progress >= self.lengths[self.sentence[rows]], progress, moved)
        if self.glues is None:
            return kept
        undone = self.just_met[rows] & self.glues[tokens][:, None]  # on from the whole's state
        return torch.where(undone, moved, kept)

    def _bank(self, progress: Tensor, sentence: Tensor) -> Tensor:
        """Phrase tokens met: every met phrase's, and the furthest progress of an unmet one."""
        lengths = self.lengths[sentence]
        met = progress >= lengths
        return (lengths * met).sum(dim=1) + (progress * ~met).amax(dim=1)

    def allocate(
        self, scores: Tensor, log_probs: Tensor, best: tuple[Tensor, Tensor, Tensor]
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The step's candidates for each sentence in the order the beam takes them: `best`
        (the best extensions: log P, row within the sentence, token, each (S, n)) with each
        row's own best token and the next token of each phrase it has not met, the banks
        taken in turn, the most advanced first. scores (S, width), log_probs (S * width, V)."""
        sentences, width = scores.size(0), scores.size(1)
        due, due_scores = self._due(log_probs)
        due_scores = scores.view(-1, 1) + due_scores
        own_scores, own = log_probs.max(dim=1)
        within = torch.arange(width, device=scores.device).repeat(sentences)[:, None]  # (N, 1)
        groups = [
            best,
            (due_scores, within.expand_as(due), due),
            (scores.view(-1) + own_scores, within, own),
        ]
        candidate_scores, candidate_rows, candidate_tokens = (
            torch.cat([group[i].reshape(sentences, -1) for group in groups], dim=1)
            for i in range(3)
        )
        candidate_scores = _without_repeats(
            candidate_scores, candidate_rows, candidate_tokens, log_probs.size(1)
        )
        return self._in_bank_order(candidate_scores, candidate_rows, candidate_tokens, width)

    def _due(self, log_probs: Tensor) -> tuple[Tensor, Tensor]:
        """(N, C) each phrase's next token for each row, the likeliest that takes it further
        (of a phrase of tokens, its next one), and that token's log P (-inf: met, or none)."""
        keys, further = self._further()
        key_scores = log_probs.gather(1, keys.clamp(min=0).flatten(1)).view_as(keys)
        best, at = key_scores.masked_fill(~further, float("-inf")).max(dim=2)
        return keys.gather(2, at[..., None]).squeeze(2).clamp(min=0), best

    def advancing(self) -> Tensor:
        """(N, C * R) each row's tokens that take a phrase it has not met further; -1 pads."""
        keys, further = self._further()
        return keys.masked_fill(~further, -1).flatten(1)

    def _further(self) -> tuple[Tensor, Tensor]:
        """(N, C, R) each row's keys of each phrase, and which take an unmet phrase further."""
        keys = self.keys[self.sentence]
        further = (self._steps() > self.progress[..., None]) & (keys >= 0)
        unmet = self.progress < self.lengths[self.sentence]
        return keys, further & unmet[..., None]

    def _in_bank_order(
        self, scores: Tensor, rows: Tensor, tokens: Tensor, width: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Candidates (S, M) sorted best first, then taken a bank at a time: each bank's best,
        the most advanced bank first, then each bank's second, and so on; impossible (-inf)
        candidates last."""
        scores, by_score = scores.sort(dim=1, descending=True, stable=True)
        rows, tokens = rows.gather(1, by_score), tokens.gather(1, by_score)
        first_row = torch.arange(scores.size(0), device=scores.device)[:, None] * width
        global_rows = (first_row + rows).flatten()
        progress = self._progressed(global_rows, tokens.flatten())
        bank = self._bank(progress, self.sentence[global_rows]).view_as(scores)
        banks = int(bank.max()) + 1
        same_bank = bank[..., None] == torch.arange(banks, device=bank.device)
        rank = same_bank.long().cumsum(dim=1).gather(2, bank[..., None]).squeeze(2) - 1
        key = rank * banks + (banks - 1 - bank)
        key = key.masked_fill(scores == float("-inf"), scores.size(1) * banks)
        order = key.argsort(dim=1, stable=True)
        return scores.gather(1, order), rows.gather(1, order), tokens.gather(1, order)

    def missing(self, sentence: int, tokens: Sequence[int]) -> int:
        """How many of the sentence's phrases `tokens` lacks (a whole one glued onto lacks)."""
        terms, tokens = self.terms[sentence], list(tokens)
        lacking = 0
        for phrase, whole, spelled in zip(terms.phrases, terms.whole, terms.spelled, strict=True):
            glued = self.glued if whole else set()
            held = spelled.held(tokens, glued) if spelled else contains(tokens, phrase, glued)
            lacking += not held
        return lacking


def _without_repeats(scores: Tensor, rows: Tensor, tokens: Tensor, vocabulary: int) -> Tensor:
    """`scores` with all but the best of each (row, token) candidate's repeats made impossible
    (a phrase already met still names its last token, impossibly)."""
    by_score = scores.argsort(dim=1, descending=True, stable=True)
    keys = (rows * vocabulary + tokens).gather(1, by_score)
    sorted_keys, where = keys.sort(dim=1, stable=True)  # each key's best first
    repeat = torch.zeros_like(keys, dtype=torch.bool)
    repeat[:, 1:] = sorted_keys[:, 1:] == sorted_keys[:, :-1]
    repeated = torch.zeros_like(repeat).scatter_(1, by_score.gather(1, where), repeat)
    return scores.masked_fill(repeated, float("-inf"))


class Both:
    """Two constraints at once (a prefix and terms): a token either rules out is ruled out."""

    def __init__(self, first: Constraint, second: Constraint):
        self.first, self.second = first, second

    def restrict(self, log_probs: Tensor, room: Tensor) -> None:
        self.first.restrict(log_probs, room)
        self.second.restrict(log_probs, room)

    def reorder(self, rows: Tensor) -> None:
        self.first.reorder(rows)
        self.second.reorder(rows)

    def advance(self, tokens: Tensor) -> None:
        self.first.advance(tokens)
        self.second.advance(tokens)


def with_terms(
    terms: Sequence[Terms | Sequence[Sequence[int]]] | None,
    constraint: Constraint | None,
    limit: Tensor,
    eos: int,
    floor: Tensor | None = None,
) -> tuple[Constraint | None, TermConstraint | None, Tensor]:
    """The search's constraint (with the terms' added), the terms' own state (None when no
    sentence has terms), and the length limits (B,) raised to fit every phrase and an EOS
    after `floor` (each output's forced start, if any). Terms given as token ids (a list of
    phrases a sentence) may be followed by any token."""
    if terms is None:
        return constraint, None, limit
    if len(terms) != limit.numel():
        raise ValueError(f"{len(terms)} term lists for {limit.numel()} sentences: give one each")
    terms = [t if isinstance(t, Terms) else of_ids(t) for t in terms]
    if not any(terms):
        return constraint, None, limit
    state = TermConstraint(terms, eos, limit.device)
    floor = torch.zeros_like(limit) if floor is None else floor
    limit = torch.maximum(limit, floor + state.needed + 1)
    return (state if constraint is None else Both(constraint, state)), state, limit


def of_ids(phrases: Sequence[Sequence[int]]) -> Terms:
    """Phrases given as token ids (the search's own API): tokens, not words (no whole word)."""
    kept = tuple(tuple(int(t) for t in phrase) for phrase in phrases if len(phrase))
    return Terms(kept, (False,) * len(kept))
