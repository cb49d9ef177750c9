"""How a term of a script written without spaces is spelled in a vocabulary's pieces inside
running text (decoding/terms.py): not as the sentencepiece encoding of the term alone, which
starts a word ("▁犬"), but as a sentence holds it ("私は犬が")."""

from __future__ import annotations

from collections.abc import Sequence

from ..data.bpe import Vocab
from .constraints import WORD_START


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
