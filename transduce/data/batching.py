"""Batches of similar-length pairs under a token budget (s5.1), and collation into tensors.

s5.1: "Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens." Here the budget counts padding: a batch's longest sequence times its size, per side.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

logger = logging.getLogger(__name__)


@dataclass
class Batch:
    """Padded id tensors: `src` = x + [eos], `tgt_in` = [bos] + y, `tgt_out` = y + [eos]."""

    src: torch.Tensor  # (B, S) long
    tgt_in: torch.Tensor  # (B, T) long; the decoder's input, shifted right by one (s3.1)
    tgt_out: torch.Tensor  # (B, T) long; what the decoder must predict at each position
    pad: int = 0
    # (source, target) non-pad token counts, known before the batch goes to a GPU: counting
    # there would make the host wait for the GPU's queue to drain at every update
    counts: tuple[int, int] | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return self.src.shape[0]

    @property
    def n_src_tokens(self) -> int:
        return self._counts()[0]

    @property
    def n_tgt_tokens(self) -> int:
        return self._counts()[1]

    @property
    def src_padded(self) -> bool:
        """Whether any source is padded, from the host's count: attention over an unpadded
        source needs no mask (a GPU then goes without one, `training.loss.MASK_FREE_DEVICES`)."""
        return self.n_src_tokens < self.src.numel()

    def _counts(self) -> tuple[int, int]:
        if self.counts is None:
            self.counts = (int((self.src != self.pad).sum()), int((self.tgt_out != self.pad).sum()))
        return self.counts

    def to(self, device: torch.device | str) -> Batch:
        """The batch on `device`. To a GPU the tensors go through pinned memory: CUDA stages a
        copy from ordinary (pageable) memory through a buffer of its own, in practice making
        the host wait for the work queued before it (SPEED.md, GPU); from pinned memory the
        copy is queued like any kernel."""
        pinned = torch.device(device).type == "cuda"

        def moved(tensor: torch.Tensor) -> torch.Tensor:
            if pinned and tensor.device.type == "cpu":
                tensor = tensor.pin_memory()
            return tensor.to(device, non_blocking=True)

        counts = self._counts()
        return Batch(moved(self.src), moved(self.tgt_in), moved(self.tgt_out), self.pad, counts)


def collate(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    vocab_pad: int = 0,
    bos: int = 2,
    eos: int = 3,
) -> Batch:
    """Pad (x, y) id pairs, given without bos/eos, into a `Batch` of S = max|x|+1, T = max|y|+1."""
    if not pairs:
        raise ValueError("collate needs at least one pair")
    n = len(pairs)
    src_len = max(len(x) for x, _ in pairs) + 1
    tgt_len = max(len(y) for _, y in pairs) + 1
    src = np.full((n, src_len), vocab_pad, dtype=np.int64)  # (B, S)
    tgt_in = np.full((n, tgt_len), vocab_pad, dtype=np.int64)  # (B, T)
    tgt_out = np.full((n, tgt_len), vocab_pad, dtype=np.int64)  # (B, T)
    for b, (x, y) in enumerate(pairs):
        src[b, : len(x)], src[b, len(x)] = x, eos
        tgt_in[b, 0], tgt_in[b, 1 : len(y) + 1] = bos, y
        tgt_out[b, : len(y)], tgt_out[b, len(y)] = y, eos
    tensors = (torch.from_numpy(a) for a in (src, tgt_in, tgt_out))
    counts = (sum(len(x) for x, _ in pairs) + n, sum(len(y) for _, y in pairs) + n)
    return Batch(*tensors, pad=vocab_pad, counts=counts)


class TokenBatchSampler:
    """Length-bucketed batches of example indices, each within `max_tokens` on both sides.

    Lengths are subword counts without bos/eos; one token is added per side, as `collate` does.
    `batches(epoch)` is a pure function of (seed, epoch): a seeded permutation breaks length
    ties, the sorted examples are cut greedily into batches, and the batch order is shuffled.
    `one_source_length`: a batch's sources are of one length (sorted by source, then target
    length), so that no source is padded and attention takes no mask (`Batch.src_padded`); but
    the last sentences of a length that fill less than half a batch join the next length's batch
    (padded, so with a mask). Without that, every length's remainder was an update of its own: at
    WMT14's lengths 2-3% of the updates held under half a batch, eight a single sentence, and on
    a GPU each new such shape recompiled the layers (a single sentence, or few source tokens,
    change the compiled code's guards; SPEED.md, GPU, session 37).
    Examples too long to fit the budget alone are skipped (`n_skipped`), with a warning unless
    `warn_skipped` is false (then logged at debug level).
    """

    def __init__(
        self,
        src_lengths: Sequence[int] | np.ndarray,
        tgt_lengths: Sequence[int] | np.ndarray,
        *,
        max_tokens: int,
        bucket_width: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        warn_skipped: bool = True,
        one_source_length: bool = False,
    ) -> None:
        self.src = np.asarray(src_lengths, dtype=np.int64) + 1  # x + [eos]
        self.tgt = np.asarray(tgt_lengths, dtype=np.int64) + 1  # [bos] + y, and y + [eos]
        if self.src.shape != self.tgt.shape or self.src.ndim != 1:
            raise ValueError(f"length arrays differ: {self.src.shape} vs {self.tgt.shape}")
        if max_tokens <= 0 or bucket_width <= 0:
            raise ValueError("max_tokens and bucket_width must be positive")
        self.max_tokens, self.bucket_width = max_tokens, bucket_width
        self.seed, self.shuffle = seed, shuffle
        self.one_source_length = one_source_length
        self.rank, self.world = 0, 1
        fits = (self.src <= max_tokens) & (self.tgt <= max_tokens)
        self._candidates = np.flatnonzero(fits)
        self.n_skipped = int(len(fits) - len(self._candidates))
        if self.n_skipped:
            (logger.warning if warn_skipped else logger.debug)(
                "skipping %d of %d examples longer than max_tokens=%d",
                self.n_skipped,
                len(fits),
                max_tokens,
            )
        self._cached: tuple[int, list[list[int]]] | None = None

    def shard(self, rank: int, world: int) -> TokenBatchSampler:
        """This sampler for one of `world` processes: rank r takes batches r, r + world, ...

        Every rank gets the same number of batches (the last `len % world` are dropped), so
        processes that synchronise each step stay in step.
        """
        if not 0 <= rank < world:
            raise ValueError(f"need 0 <= rank < world, got rank {rank}, world {world}")
        shard = copy.copy(self)
        shard.rank, shard.world = rank, world
        return shard

    def batches(self, epoch: int) -> list[list[int]]:
        """This epoch's batches (this rank's share of them), each a list of example indices."""
        return [list(batch) for batch in self._shared_out(epoch)[self.rank :: self.world]]

    def _shared_out(self, epoch: int) -> list[list[int]]:
        """Every rank's batches of `epoch`: all but the last `len % world`, which are no one's."""
        if self._cached is None or self._cached[0] != epoch:
            self._cached = (epoch, self._make_batches(epoch))
        batches = self._cached[1]
        return batches[: len(batches) // self.world * self.world]

    def iterate(self, epoch: int, start: int = 0) -> Iterator[list[int]]:
        """The batches of `epoch` from batch number `start` on, to resume a run mid-epoch."""
        batches = self.batches(epoch)
        if not 0 <= start <= len(batches):
            raise ValueError(f"start {start} is outside epoch {epoch}'s {len(batches)} batches")
        yield from batches[start:]

    def num_batches(self, epoch: int) -> int:
        return len(self.batches(epoch))

    def fingerprint(self, epoch: int) -> str:
        """A digest of this epoch's batches, every rank's share (the same in every process: only
        the first saves it): a checkpoint keeps it, so that a resumed run can tell whether the
        rest of the epoch is the rest it was cut with."""
        batches = self._shared_out(epoch)
        sizes = np.array([len(batch) for batch in batches], dtype=np.int64)
        indices = np.fromiter(itertools.chain.from_iterable(batches), dtype=np.int64)
        return hashlib.sha256(sizes.tobytes() + indices.tobytes()).hexdigest()[:16]

    def _make_batches(self, epoch: int) -> list[list[int]]:
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(self._candidates) if self.shuffle else self._candidates
        width = self.bucket_width
        src_bucket = (self.src[order] + width - 1) // width
        tgt_bucket = (self.tgt[order] + width - 1) // width
        # Sorted by the longer side first: the budget binds on it, so both sides pad little
        # (Multi30k, 4,096 tokens: 3% target and 5% source padding, where sorting by source
        # length first pads the target side 13%). lexsort's last key is the primary one, and
        # it is stable: the permutation breaks ties.
        if self.one_source_length:
            # Targets ascending within one source length, descending within the next: the
            # longest targets of a length's remainder meet the next length's longest.
            _, length_rank = np.unique(self.src[order], return_inverse=True)
            snaking = np.where(length_rank % 2 == 0, tgt_bucket, -tgt_bucket)
            order = order[np.lexsort((snaking, self.src[order]))]
        else:
            longer = np.maximum(src_bucket, tgt_bucket)
            order = order[np.lexsort((src_bucket, tgt_bucket, longer))]
        batches = self._cut(order.tolist())
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def _cut(self, order: list[int]) -> list[list[int]]:
        """Greedy: extend the batch while max length times size stays in budget on both sides
        (and, with `one_source_length`, while the source length stays the same, unless the batch
        is under half the budget: a length's last few sentences then share a batch with the next
        length's, padded, rather than make an update of their own)."""
        src, tgt, budget = self.src.tolist(), self.tgt.tolist(), self.max_tokens
        batches, current, src_max, tgt_max = [], [], 0, 0
        for i in order:
            new_src, new_tgt = max(src_max, src[i]), max(tgt_max, tgt[i])
            size = len(current) + 1
            over = new_src * size > budget or new_tgt * size > budget
            next_length = (  # closes the batch only once it holds half the budget
                self.one_source_length
                and src[i] != src_max
                and 2 * max(src_max, tgt_max) * len(current) >= budget
            )
            if current and (over or next_length):
                batches.append(current)
                current, new_src, new_tgt = [], src[i], tgt[i]
            current.append(i)
            src_max, tgt_max = new_src, new_tgt
        if current:
            batches.append(current)
        return batches
