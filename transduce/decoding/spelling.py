"""How a term of a script written without spaces is spelled in a vocabulary's pieces inside
running text (decoding/terms.py): not as the sentencepiece encoding of the term alone, which
starts a word ("▁犬"), but as a sentence holds it ("私は犬が")."""

from __future__ import annotations

import functools
from collections.abc import Sequence, Set
from dataclasses import dataclass, field

from ..data.bpe import Vocab
from ..writing import bounds_words
from .constraints import WORD_START
from .phrases import borders


def glued(vocab: Vocab, text: str, ids: Sequence[int]) -> tuple[int, ...]:
    """A phrase as running text without spaces holds it: encoded alone, its first piece starts
    a word ("▁犬"), which inside a Japanese sentence it does not ("私は犬が"), and its pieces
    may differ there ("▁東京" "都" alone, "東" "京都" after other text). So it is encoded
    after a comma ("、"), as it comes inside a sentence, where its pieces start apart from the
    comma's; else the mark dropped, the rest of the first piece spelled in pieces without it
    ("▁一体" as "一" "体" where the vocabulary has no "一体")."""
    after = _after_comma(vocab, text)
    if after:
        return after
    first = vocab.pieces([ids[0]])[0]
    if first == WORD_START and len(ids) > 1:
        return tuple(ids[1:])
    if first.startswith(WORD_START) and len(first) > 1:
        glued = _spelled(vocab, first[1:])
        if glued:
            return (*glued, *ids[1:])
    return tuple(ids)


def _after_comma(vocab: Vocab, text: str) -> tuple[int, ...]:
    """`text`'s pieces when it follows "、", () if one of them would hold the comma too."""
    ids = vocab.encode(["、" + text])[0]
    for i, piece in enumerate(vocab.pieces(ids)):
        if spelled := piece.replace(WORD_START, ""):  # the first piece with text: the comma's
            return tuple(ids[i + 1 :]) if spelled == "、" else ()
    return ()


def _spelled(vocab: Vocab, text: str) -> list[int]:
    """`text` in pieces without a word start, each the longest that fits from the left; []
    if a character has none."""
    ids = []
    while text:
        for end in range(len(text), 0, -1):
            piece = vocab.piece_ids([text[:end]])[0]
            if piece != vocab.unk:
                ids.append(piece)
                text = text[end:]
                break
        else:
            return []
    return ids


@dataclass(frozen=True)
class Spelling:
    """A phrase followed by its characters, whatever pieces spell them: running text of a
    script without spaces segments a word by its neighbours ("▁私は", "私はこれ"), so the term
    "これ" may come inside any of them. `steps[p][r]`: the characters matched after the piece
    `keys[r]` comes with `p` matched (the longest start of `text` that ends the output); every
    other piece resets to 0. `len(text)` matched: the term ends the piece (a piece gluing on
    may undo it); `len(text) + 1`: met inside a piece, for good. `resume[p][r]`: the characters
    matched at the piece's end whatever it met inside it (an avoided phrase, once given way to,
    is followed on from there). A phrase that starts a word of a spaced script ("AI技術") may
    not start after a letter of one ("OpenAI技術"): `blocked[r]`, the characters matched after
    the piece `keys[r]` with none matched after a piece of `word_ends` (one that ends in such a
    letter); else `blocked` is `steps[0]`."""

    text: str
    keys: tuple[int, ...]
    steps: tuple[tuple[int, ...], ...]
    resume: tuple[tuple[int, ...], ...]
    blocked: tuple[int, ...] = ()
    word_ends: frozenset[int] = field(default=frozenset(), compare=False, repr=False)

    def held(self, tokens: Sequence[int], glued: Set[int] = frozenset()) -> bool:
        """Whether `tokens` hold it, not glued onto by a token of `glued` (as the search
        follows it: a term the next token glues onto is undone, and that token's characters
        go on from its whole)."""
        column = {key: r for r, key in enumerate(self.keys)}
        progress, length, after_word = 0, len(self.text), False
        for i, token in enumerate(tokens):
            r = column.get(token)
            row = self.blocked if progress == 0 and after_word else self.steps[progress]
            progress, after_word = 0 if r is None else row[r], token in self.word_ends
            ends = progress == length and (i + 1 == len(tokens) or tokens[i + 1] not in glued)
            if progress > length or ends:
                return True
        return False


@functools.lru_cache(maxsize=1024)  # a glossary's terms come again (each ~10-100 KB)
def spelling(vocab: Vocab, text: str, whole: bool, bounded: bool = False) -> Spelling:
    """`text`'s `Spelling` over the vocabulary's pieces; a `whole` phrase (it ends in a
    spaced script's letter: "新しいiPhone") is not met where a letter of the piece goes on
    after it ("iPhones"), a `bounded` one (it starts with one) where one comes before it."""
    text = text.replace(" ", WORD_START)
    pieces, _, _, word_ends = _pieces_by_char(vocab)
    moves, states = _automaton(text, bounded), range(len(text) + 1)
    keys, steps, resume, blocked = [], [], [], []
    for token in sorted(_candidates(vocab, text)):
        piece = pieces[token]
        row = [_after(moves, text, piece, p, whole, bounded, False) for p in states]
        if any(row):
            keys.append(token)
            steps.append(row)
            resume.append([_through(moves, piece, p) for p in states])
            blocked.append(_after(moves, text, piece, 0, whole, True, True) if bounded else row[0])
    rows = [tuple(step[p] for step in steps) for p in states]
    resumed = [tuple(ends[p] for ends in resume) for p in states]
    return Spelling(text, tuple(keys), (*rows, rows[-1]), (*resumed, resumed[-1]),
                    tuple(blocked), word_ends if bounded else frozenset())  # fmt: skip


def _automaton(text: str, bounded: bool = False) -> list[dict[str, int]]:
    """Knuth-Morris-Pratt over characters: moves[p][c], the characters matched after `c` with
    `p` matched (a character absent from the row: 0), for p up to len(text): the longest start
    of `text` that ends the text so far and, if `bounded`, does not start after a spaced
    script's letter (from nothing matched, the caller knows what came before)."""
    border = borders(text)
    moves = [{char: _next(text, border, p, char, bounded) for char in set(text)}
             for p in range(len(text) + 1)]  # fmt: skip
    return [{char: q for char, q in row.items() if q} for row in moves]


def _next(text: str, border: list[int], p: int, char: str, bounded: bool) -> int:
    """`_automaton`'s move: along the starts of `text` that end its first p characters, the
    longest first, the first that `char` goes on (and that is no continuation of a spaced
    word, if `bounded`); 0 if none."""
    b = p
    while True:
        continues = b < len(text) and text[b] == char
        if continues and (b == p or not bounded or not bounds_words(text[p - b - 1])):
            return b + 1
        if b == 0:
            return 0
        b = border[b - 1]


def _after(
    moves: list[dict[str, int]],
    text: str,
    piece: str,
    p: int,
    whole: bool,
    bounded: bool,
    after_word: bool,
) -> int:
    """The characters matched after `piece` with `p` matched (and, `after_word`, a spaced
    script's letter last): len(text) + 1 once met inside the piece and not glued onto there."""
    for i, char in enumerate(piece):
        p = 0 if bounded and p == 0 and after_word else moves[p].get(char, 0)
        after_word = bounds_words(char)
        if p == len(text) and i + 1 < len(piece) and not (whole and bounds_words(piece[i + 1])):
            return p + 1
    return p


def _through(moves: list[dict[str, int]], piece: str, p: int) -> int:
    """The characters matched at the end of `piece` with `p` matched before it, a whole match
    inside it followed on from its border."""
    for char in piece:
        p = moves[p].get(char, 0)
    return p


@functools.lru_cache(maxsize=4)
def _pieces_by_char(
    vocab: Vocab,
) -> tuple[list[str], dict[str, set[int]], dict[str, set[int]], frozenset[int]]:
    """The vocabulary's pieces; for each character the pieces that end in it and those that
    hold it (not the special tokens); the pieces that end in a spaced script's letter."""
    specials = {vocab.pad, vocab.unk, vocab.bos, vocab.eos}
    pieces = vocab.pieces(list(range(vocab.size)))
    ending: dict[str, set[int]] = {}
    holding: dict[str, set[int]] = {}
    for token, piece in enumerate(pieces):
        if token in specials or not piece:
            continue
        ending.setdefault(piece[-1], set()).add(token)
        for char in set(piece):
            holding.setdefault(char, set()).add(token)
    word_ends = frozenset(t for t, piece in enumerate(pieces) if piece and bounds_words(piece[-1]))
    return pieces, ending, holding, word_ends


def _candidates(vocab: Vocab, text: str) -> set[int]:
    """The pieces that may leave some of `text` matched: those ending in one of its characters,
    and those holding its last (the whole of it may end inside one)."""
    _, ending, holding, _ = _pieces_by_char(vocab)
    found = set(holding.get(text[-1], ()))
    for char in set(text):
        found |= ending.get(char, set())
    return found
