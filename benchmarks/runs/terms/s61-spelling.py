"""How often a glued term's pieces are the ones its reference sentence holds it in (session 61).

For each word (2 or more characters, not sentence-initial, writable) of the tokenized dev
references of `s61-raw-ja.sh`'s raw Japanese, whether the raw reference's own encoding holds the
term's phrase: as parsed now (after a comma), and as session 60 parsed it (the lone encoding's
first piece without its word start).

    python benchmarks/runs/terms/s61-spelling.py OUT     # OUT of s61-raw-ja.sh
"""

import sys
from pathlib import Path

from transduce.data.dataset import PreparedData
from transduce.decoding.constraints import WORD_START
from transduce.decoding.terms import contains, parse_terms
from transduce.writing import unspaced

out = Path(sys.argv[1])
vocab = PreparedData.load(out / "data").vocab


def session_60(ids):
    first = vocab.pieces([ids[0]])[0]
    if first == WORD_START and len(ids) > 1:
        return tuple(ids[1:])
    if first.startswith(WORD_START) and len(first) > 1:
        twin = vocab.piece_ids([first[1:]])[0]
        if twin != vocab.unk:
            return (twin, *ids[1:])
    return tuple(ids)


raw = (out / "dev.ja").read_text(encoding="utf-8").splitlines()
tokenized = (out / "dev.tok.ja").read_text(encoding="utf-8").splitlines()
words = then = now = 0
for line, tokens in zip(raw, tokenized, strict=True):
    ids = vocab.encode([line])[0]
    for word in set(tokens.split()):
        if len(word) < 2 or not word.isalpha() or not unspaced(word[0]) or line.startswith(word):
            continue
        if vocab.lacking(word):
            continue
        words += 1
        then += contains(ids, session_60(vocab.encode([word])[0]))
        now += contains(ids, parse_terms(vocab, [[word]])[0].phrases[0])
print(
    f"{words} reference words: the reference's encoding holds the term's pieces for {now} "
    f"(session 60's parsing: {then})"
)
