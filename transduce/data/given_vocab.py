"""A vocabulary brought from a trained model (`prepare --vocab`), to encode new data with so that
the model can be fine-tuned on it: its special ids checked, the characters it lacks named."""

from __future__ import annotations

import collections
import logging
from pathlib import Path

from .bpe import BOS, EOS, PAD, UNK, Vocab
from .corpus import DataError

logger = logging.getLogger(__name__)


def adopt(vocab: Vocab, path: Path, training_lines: list[str]) -> Vocab:
    """Write `vocab`'s sentencepiece model to `path` and read it back from there, as a trained
    one is; first say which characters of the training text it lacks."""
    _report_unknown_characters(training_lines, vocab)
    path.write_bytes(vocab.serialized)
    return Vocab.load(path)


def check_special_ids(vocab: Vocab) -> None:
    """A sentencepiece model trained elsewhere numbers its special pieces its own way (its
    defaults: unk 0, bos 1, eos 2, no padding); models here embed padding at 0 (bpe.py)."""
    ids = {"pad": vocab.pad, "unk": vocab.unk, "bos": vocab.bos, "eos": vocab.eos}
    if tuple(ids.values()) != (PAD, UNK, BOS, EOS):
        found = ", ".join(f"{name} {i}" for name, i in ids.items())
        raise DataError(
            f"the given vocabulary numbers its special pieces {found}; transduce needs pad 0, "
            "unk 1, bos 2, eos 3 (sentencepiece's pad_id=0 unk_id=1 bos_id=2 eos_id=3)"
        )


def _report_unknown_characters(lines: list[str], vocab: Vocab) -> None:
    """Warn when the training text holds characters a given vocabulary lacks: they all become one
    unknown piece, which a model fine-tuned on them can read but never write."""
    seen = collections.Counter(char for line in lines for char in line)
    counts = collections.Counter({char: seen[char] for char in vocab.lacking(seen)})
    if not counts:
        return
    shown = ", ".join(repr(char) for char, _ in counts.most_common(8))
    logger.warning(
        "the given vocabulary lacks %d character(s) of the training text, %d time(s) in all (most "
        "often %s): each becomes <unk>, which a model fine-tuned on this data cannot write",
        len(counts),
        counts.total(),
        shown,
    )
