"""How a term of a script written without spaces is spelled in a vocabulary's pieces inside
running text (decoding/terms.py): not as the sentencepiece encoding of the term alone, which
starts a word ("▁犬"), but as a sentence holds it ("私は犬が")."""

from __future__ import annotations

import functools
from collections.abc import Sequence, Set
from dataclasses import dataclass

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
    is followed on from there)."""

    text: str
    keys: tuple[int, ...]
    steps: tuple[tuple[int, ...], ...]
    resume: tuple[tuple[int, ...], ...]

    def held(self, tokens: Sequence[int], glued: Set[int] = frozenset()) -> bool:
        """Whether `tokens` hold it, not glued onto by a token of `glued` (as the search
        follows it: a term the next token glues onto is undone, and that token's characters
        go on from its whole)."""
        column = {key: r for r, key in enumerate(self.keys)}
        progress, length = 0, len(self.text)
        for i, token in enumerate(tokens):
            r = column.get(token)
            progress = 0 if r is None else self.steps[progress][r]
            ends = progress == length and (i + 1 == len(tokens) or tokens[i + 1] not in glued)
            if progress > length or ends:
                return True
        return False


@functools.lru_cache(maxsize=1024)  # a glossary's terms come again (each ~10-100 KB)
def spelling(vocab: Vocab, text: str, whole: bool) -> Spelling:
    """`text`'s `Spelling` over the vocabulary's pieces; a `whole` phrase (it ends in a
    spaced script's letter: "新しいiPhone") is not met where a letter of the piece goes on
    after it ("iPhones")."""
    text = text.replace(" ", WORD_START)
    pieces, _, _ = _pieces_by_char(vocab)
    moves = _automaton(text)
    keys, steps, resume = [], [], []
    for token in sorted(_candidates(vocab, text)):
        row = [_after(moves, text, pieces[token], p, whole) for p in range(len(text) + 1)]
        if any(row):
            keys.append(token)
            steps.append(row)
            resume.append([_through(moves, pieces[token], p) for p in range(len(text) + 1)])
    rows = [tuple(step[p] for step in steps) for p in range(len(text) + 1)]
    resumed = [tuple(ends[p] for ends in resume) for p in range(len(text) + 1)]
    return Spelling(text, tuple(keys), (*rows, rows[-1]), (*resumed, resumed[-1]))


def _automaton(text: str) -> list[dict[str, int]]:
    """Knuth-Morris-Pratt over characters: moves[p][c], the characters matched after `c` with
    `p` matched (a character absent from the row: 0), for p up to len(text)."""
    border = borders(text)
    moves: list[dict[str, int]] = []
    for p in range(len(text) + 1):
        row = dict(moves[border[p - 1]]) if p else {}
        if p < len(text):
            row[text[p]] = p + 1
        moves.append(row)
    return moves


def _after(moves: list[dict[str, int]], text: str, piece: str, p: int, whole: bool) -> int:
    """The characters matched after `piece` with `p` matched: len(text) + 1 once met inside
    the piece and not glued onto there."""
    for i, char in enumerate(piece):
        p = moves[p].get(char, 0)
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
def _pieces_by_char(vocab: Vocab) -> tuple[list[str], dict[str, set[int]], dict[str, set[int]]]:
    """The vocabulary's pieces, and for each character the pieces that end in it and those that
    hold it (not the special tokens)."""
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
    return pieces, ending, holding


def _candidates(vocab: Vocab, text: str) -> set[int]:
    """The pieces that may leave some of `text` matched: those ending in one of its characters,
    and those holding its last (the whole of it may end inside one)."""
    _, ending, holding = _pieces_by_char(vocab)
    found = set(holding.get(text[-1], ()))
    for char in set(text):
        found |= ending.get(char, set())
    return found
