"""Joint source-target byte-pair encoding (s5.1) with sentencepiece: train, encode, decode.

One vocabulary serves both languages, so the source and target embeddings can be shared (s3.4).
Ids 0-3 are fixed: pad 0, unk 1, bos 2, eos 3.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import sentencepiece as spm

from .corpus import DataError

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SEED = 1


class Vocab:
    """A trained sentencepiece model: text <-> subword ids. No bos/eos is added by `encode`."""

    def __init__(self, processor: spm.SentencePieceProcessor) -> None:
        self._sp = processor
        self.pad, self.unk, self.bos, self.eos = (
            processor.pad_id(),
            processor.unk_id(),
            processor.bos_id(),
            processor.eos_id(),
        )
        self._specials = {self.pad, self.bos, self.eos}

    @classmethod
    def load(cls, path: Path | str) -> Vocab:
        processor = spm.SentencePieceProcessor()
        try:
            processor.Load(str(path))
        except (OSError, RuntimeError) as error:
            raise DataError(f"{path}: not a sentencepiece model ({error})") from error
        return cls(processor)

    @classmethod
    def from_bytes(cls, model: bytes) -> Vocab:
        """A vocabulary from `serialized` bytes, e.g. as stored inside a checkpoint."""
        processor = spm.SentencePieceProcessor()
        processor.LoadFromSerializedProto(model)
        return cls(processor)

    def __reduce__(self):  # pickled as its model's bytes, e.g. to the server's decoding process
        return (Vocab.from_bytes, (self.serialized,))

    @property
    def serialized(self) -> bytes:
        return self._sp.serialized_model_proto()

    @property
    def size(self) -> int:
        return self._sp.get_piece_size()

    def __len__(self) -> int:
        return self.size

    def encode(self, lines: list[str]) -> list[list[int]]:
        return self._sp.encode(list(lines), out_type=int)

    def lacking(self, text: Iterable[str]) -> list[str]:
        """The distinct characters of `text` the vocabulary has no piece for, sorted: each
        becomes <unk>, which a model can read but never write."""
        chars = sorted(set(text))
        encoded = self.encode(chars)  # each on its own, through the model's own normalisation
        return [char for char, ids in zip(chars, encoded, strict=True) if self.unk in ids]

    def encode_with_dropout(self, lines: list[str], dropout: float, seed: int) -> list[list[int]]:
        """BPE-dropout (Provilkov et al. 2020): each merge is skipped with probability
        `dropout`, so a word may come out as smaller pieces of the vocabulary than `encode`
        gives. The same lines, rate and seed give the same ids within one process (one thread,
        seeded first), not across processes: sentencepiece's generator is not fixed by the seed
        from one process to the next (data/epochs.py)."""
        spm.set_random_generator_seed(seed)
        return self._sp.encode(
            list(lines),
            out_type=int,
            enable_sampling=True,
            alpha=dropout,  # for a BPE model, sentencepiece's alpha is the merge-dropout rate
            nbest_size=-1,
            num_threads=1,  # several threads would share the seeded generator in any order
        )

    def decode(self, ids: Iterable[Iterable[int]]) -> list[str]:
        """Text for each id sequence; pad, bos and eos are dropped wherever they occur."""
        clean = [[int(i) for i in seq if int(i) not in self._specials] for seq in ids]
        return self._sp.decode(clean)

    def piece_ids(self, pieces: Sequence[str]) -> list[int]:
        """The ids of subword strings, e.g. as another toolkit returns them."""
        return [self._sp.piece_to_id(piece) for piece in pieces]

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The subword strings of `ids`, for attention maps and debugging."""
        return [self._sp.id_to_piece(int(i)) for i in ids]


def train_joint(
    texts: Iterable[str],
    vocab_size: int,
    model_prefix: Path,
    *,
    character_coverage: float = 1.0,
    whole_tokens: Sequence[str] = (),
) -> Vocab:
    """Train one BPE model on `texts` (source and target lines together); writes `.model`/`.vocab`.

    Deterministic for the same texts in the same order. The vocabulary may come out smaller than
    `vocab_size` on a tiny corpus (the limit is soft); `Vocab.size` is the real size.
    `whole_tokens` (e.g. a parse's `(NP` and `)NP`) are each one piece wherever they stand
    between spaces, so a linearised tree is as many pieces as it has tokens.
    """
    if isinstance(whole_tokens, str):  # each character would become a whole token
        raise TypeError(f"whole_tokens must be a list of tokens, e.g. [{whole_tokens!r}]")
    model_prefix = Path(model_prefix)
    model_prefix.parent.mkdir(parents=True, exist_ok=True)
    spm.set_random_generator_seed(SEED)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_prefix=str(model_prefix),
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        hard_vocab_limit=False,
        # keep the text as given: NFKC would change characters, so decode would not give it back
        normalization_rule_name="identity",
        input_sentence_size=0,  # use every sentence, no sampling
        shuffle_input_sentence=False,
        num_threads=1,
        # keep runs of spaces too, so that decode(encode(line)) == line exactly
        remove_extra_whitespaces=False,
        # "▁" marks a preceding space: with it, a symbol matches only as a whole token
        user_defined_symbols=[f"\u2581{token}" for token in whole_tokens],
        minloglevel=2,
    )
    return Vocab.load(model_prefix.with_name(model_prefix.name + ".model"))
