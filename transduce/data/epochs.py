"""What each training epoch sees: the training pairs as subword ids, and their batches.

With `data.bpe_dropout` at 0, every epoch sees `prepare`'s one segmentation and only the order of
the batches changes. Above 0, the training text is segmented afresh for each epoch with
BPE-dropout (Provilkov et al. 2020, "BPE-Dropout: Simple and Effective Subword Regularization"):
each merge is skipped with that probability, so the model meets a word both as its own piece and
as the smaller pieces inside it, and learns how pieces compose. Dev, test and translation keep the
one deterministic segmentation, as in that paper.

Epoch e's segmentation, like its batches, is a function of (seed, e) within one process: a run
stopped and resumed in the same process sees the data an uninterrupted run would. Not across
processes: sentencepiece's sampling draws from a generator that its seed does not fix from one
process to the next (found in session 37), so a run resumed by a new process meets a new
segmentation of the epoch under way (the checkpoint's batch fingerprint warns of it;
training/resume.py), and several training processes are refused.

With `train.both_ways` the first epochs see each pair twice, as it is and reversed (bidirectional
training, Ding et al. 2021, "Improving Neural Machine Translation by Bidirectional Training"):
the model learns the target language's side as a source too, before it turns to the one direction.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..config import DataConfig
from .batching import TokenBatchSampler
from .bpe import Vocab
from .dataset import EncodedSplit

Pairs = list[tuple[np.ndarray, np.ndarray]]  # one batch's (x, y) id pairs, for `collate`


class TrainingEpochs:
    """The train split and its batches for each epoch, resegmented when `data.bpe_dropout` > 0.

    Batches follow `data` (budget, bucket width) and `seed`; `rank` of `world` processes takes
    its share of them (TokenBatchSampler.shard).
    """

    def __init__(
        self,
        split: EncodedSplit,
        vocab: Vocab,
        data: DataConfig,
        *,
        seed: int,
        rank: int = 0,
        world: int = 1,
    ) -> None:
        if data.bpe_dropout > 0 and world > 1:
            raise ValueError(
                "data.bpe_dropout needs one training process: sentencepiece's sampling is not "
                "reproducible from its seed across processes, so each process would segment "
                "the epoch its own way and their shares of the batches would overlap"
            )
        self._split, self._vocab, self._data, self._seed = split, vocab, data, seed
        self._shard = (rank, world)
        self._warned_of_skips = False  # the first sampler warns of over-long examples
        self._fixed = self._sampler_for(split) if data.bpe_dropout == 0 else None
        self._text: tuple[list[str], list[str]] | None = None
        self._current: tuple[tuple[int, bool], EncodedSplit, TokenBatchSampler] | None = None
        # The epochs before this one see each pair both ways (`train.both_ways`; the training
        # loop moves it on as it decides each epoch), and the fixed split's both ways.
        self.both_ways_epochs = 0
        self._both_ways: tuple[EncodedSplit, TokenBatchSampler] | None = None

    def split(self, epoch: int) -> EncodedSplit:
        return self._epoch(epoch)[0]

    def sampler(self, epoch: int) -> TokenBatchSampler:
        return self._epoch(epoch)[1]

    def num_batches(self, epoch: int) -> int:
        return self.sampler(epoch).num_batches(epoch)

    def fingerprint(self, epoch: int) -> str:
        return self.sampler(epoch).fingerprint(epoch)

    def batches(self, epoch: int, start: int = 0) -> Iterator[Pairs]:
        """The pairs of each of `epoch`'s batches from batch number `start` on (to resume)."""
        split, sampler = self._epoch(epoch)
        for indices in sampler.iterate(epoch, start):
            yield split.pairs(indices)

    def _epoch(self, epoch: int) -> tuple[EncodedSplit, TokenBatchSampler]:
        both_ways = epoch < self.both_ways_epochs
        if self._fixed is not None and not both_ways:
            self._both_ways = None  # its last epoch is over
            return self._split, self._fixed
        if self._fixed is not None:
            if self._both_ways is None:
                split = self._split.both_ways()
                self._both_ways = (split, self._sampler_for(split))
            return self._both_ways
        if self._current is None or self._current[0] != (epoch, both_ways):
            # One epoch is held; batches already handed out keep their own arrays.
            split = self._resegment(epoch)
            split = split.both_ways() if both_ways else split
            self._current = ((epoch, both_ways), split, self._sampler_for(split))
        return self._current[1], self._current[2]

    def _sampler_for(self, split: EncodedSplit) -> TokenBatchSampler:
        # Under BPE-dropout each epoch has a sampler of its own: the first one's warning about
        # over-long examples is the run's, not repeated every epoch.
        sampler = TokenBatchSampler(
            split.src_lengths,
            split.tgt_lengths,
            max_tokens=self._data.max_tokens,
            bucket_width=self._data.bucket_width,
            seed=self._seed,
            one_source_length=self._data.one_source_length,
            warn_skipped=not self._warned_of_skips,
        )
        self._warned_of_skips = True
        return sampler.shard(*self._shard)

    def _resegment(self, epoch: int) -> EncodedSplit:
        src_text, tgt_text = self._training_text()
        # One seed per (run seed, epoch, side), so the two sides drop different merges.
        src_seed, tgt_seed = np.random.SeedSequence([self._seed, epoch]).generate_state(2)
        dropout = self._data.bpe_dropout
        src = self._vocab.encode_with_dropout(src_text, dropout, int(src_seed))
        tgt = self._vocab.encode_with_dropout(tgt_text, dropout, int(tgt_seed))
        return EncodedSplit.from_sequences(src, tgt, self._split.index)

    def _training_text(self) -> tuple[list[str], list[str]]:
        """The training text, recovered from its ids: `prepare` keeps no copy of it, and its
        segmentation gives the text back exactly (bpe.train_joint keeps every character)."""
        if self._text is None:
            split = self._split
            pairs = [split.pair(i) for i in range(len(split))]
            src = self._vocab.decode(x for x, _ in pairs)
            tgt = self._vocab.decode(y for _, y in pairs)
            self._text = (src, tgt)
        return self._text
