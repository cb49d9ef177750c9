"""Token-budget batches (s5.1) and collation into shifted, padded tensors (batching.py)."""

from __future__ import annotations

import itertools
import logging
import time

import numpy as np
import pytest
import torch

from transduce.data.batching import Batch, TokenBatchSampler, collate

PAD, BOS, EOS = 0, 2, 3


def lengths(n: int = 500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 60, n)
    return src, np.clip(src + rng.integers(-5, 15, n), 0, None)


# --- collate --------------------------------------------------------------------------------


def test_collate_shapes_eos_bos_and_shift():
    pairs = [([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14]), ([], [])]
    batch = collate(pairs, vocab_pad=PAD, bos=BOS, eos=EOS)
    assert batch.src.shape == (3, 4) and batch.tgt_in.shape == batch.tgt_out.shape == (3, 5)
    assert batch.src.dtype == batch.tgt_in.dtype == torch.long
    assert batch.src.tolist() == [[5, 6, 7, 3], [10, 3, 0, 0], [3, 0, 0, 0]]
    assert batch.tgt_in.tolist()[0] == [2, 8, 9, 0, 0]
    assert batch.tgt_out.tolist()[0] == [8, 9, 3, 0, 0]
    for b, (_, y) in enumerate(pairs):
        n = len(y) + 1  # non-pad positions
        assert batch.tgt_in[b, 0] == BOS and batch.tgt_out[b, n - 1] == EOS
        assert torch.equal(batch.tgt_in[b, 1:n], batch.tgt_out[b, : n - 1])
        assert (batch.tgt_in[b, n:] == PAD).all() and (batch.tgt_out[b, n:] == PAD).all()
    assert batch.n_src_tokens == 3 + 1 + 1 + 1 + 1 == 7
    assert batch.n_tgt_tokens == 3 + 5 + 1 == 9 and len(batch) == 3


def test_token_counts_are_known_before_the_batch_moves_and_travel_with_it():
    """collate counts from the lengths, so that a GPU batch is never counted on the GPU (the
    host would wait for the GPU's queue); the counts equal counting the tensors."""
    pairs = [([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14]), ([], [])]
    batch = collate(pairs, vocab_pad=PAD, bos=BOS, eos=EOS)
    counted = Batch(batch.src, batch.tgt_in, batch.tgt_out, PAD)  # no counts: from the tensors
    assert batch.counts == (counted.n_src_tokens, counted.n_tgt_tokens) == (7, 9)
    moved = batch.to("cpu")
    assert moved.counts == (7, 9) and moved.n_tgt_tokens == 9


def test_collate_takes_numpy_and_moves_devices():
    pairs = [(np.array([4, 5], dtype=np.int32), np.array([6], dtype=np.int32))]
    batch = collate(pairs).to("cpu")
    assert isinstance(batch, Batch) and batch.src.tolist() == [[4, 5, 3]]
    with pytest.raises(ValueError):
        collate([])


# --- the sampler ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "max_tokens, width, shuffle", [(200, 1, True), (64, 4, True), (150, 1, False)]
)
def test_each_example_once_and_no_batch_over_budget(max_tokens, width, shuffle):
    src, tgt = lengths()
    sampler = TokenBatchSampler(
        src, tgt, max_tokens=max_tokens, bucket_width=width, seed=3, shuffle=shuffle
    )
    long = (src + 1 > max_tokens) | (tgt + 1 > max_tokens)
    assert sampler.n_skipped == long.sum()
    for epoch in (0, 1):
        batches = sampler.batches(epoch)
        seen = sorted(i for batch in batches for i in batch)
        assert seen == np.flatnonzero(~long).tolist()  # each kept example exactly once
        for batch in batches:
            size = len(batch)
            assert (src[batch].max() + 1) * size <= max_tokens
            assert (tgt[batch].max() + 1) * size <= max_tokens
            assert collate([([4] * src[i], [4] * tgt[i]) for i in batch]).src.numel() <= max_tokens


def test_batches_group_similar_lengths_on_both_sides():
    src, tgt = lengths(2000)
    sampler = TokenBatchSampler(src, tgt, max_tokens=400, seed=0)
    # Targets here are mostly the longer side: the sort keeps their padding smallest (sorting
    # by source length first pads them 13%); random batches would pad both far more.
    for side, limit in ((src, 1.15), (tgt, 1.05)):
        padded = sum((side[b].max() + 1) * len(b) for b in sampler.batches(0))
        assert padded < limit * (side + 1).sum()


def test_batches_of_one_source_length_pad_no_source_and_keep_every_example_once():
    src, tgt = lengths(2000)
    sampler = TokenBatchSampler(src, tgt, max_tokens=400, seed=0, one_source_length=True)
    batches = sampler.batches(0)
    assert sorted(i for b in batches for i in b) == np.flatnonzero(sampler.src <= 400).tolist()
    for batch in batches:
        assert (tgt[batch].max() + 1) * len(batch) <= 400 >= (src[batch].max() + 1) * len(batch)
        pairs = [([4] * src[i], [4] * tgt[i]) for i in batch]
        assert collate(pairs).src_padded == (len(set(src[batch])) > 1)
    # Only the few last sentences of a length, under half a batch, join the next length's batch
    # (padded), rather than make an update of their own; every batch but one is half full.
    unpadded = [b for b in batches if len(set(src[b])) == 1]
    assert len(unpadded) > 0.8 * len(batches)
    for batch in batches:
        *shorter, longest = sorted(set(src[batch]))
        for length in shorter:
            assert 2 * (longest + 1) * sum(src[batch] == length) < 400
    padded_tokens = [max(src[b].max(), tgt[b].max()) * len(b) for b in batches]
    assert sum(2 * tokens < 400 for tokens in padded_tokens) <= 1
    padded = sum((src[b].max() + 1) * len(b) for b in batches)
    assert padded < 1.01 * (src + 1).sum()
    # sorted by target length within a source length (the next length the other way round, so
    # that a remainder's longest targets meet the next length's longest): the targets pad little
    padded = sum((tgt[b].max() + 1) * len(b) for b in batches)
    assert padded < 1.12 * (tgt + 1).sum()  # 1.22 unsorted by target
    shared = [b for b in batches if len(set(src[b])) > 1]
    padded = sum((tgt[b].max() + 1) * len(b) for b in shared)
    assert padded < 1.25 * sum((tgt[b] + 1).sum() for b in shared)  # 1.48 sorted one way
    assert sampler.batches(1) != batches  # still shuffled by epoch


def test_the_fingerprint_of_an_epoch_changes_with_its_batches_alone():
    """Resuming compares it (training/resume.py): equal batches, equal prints; batches of the same
    sizes holding other examples, or the same examples cut otherwise, differ."""
    same_lengths = [5] * 200
    sampler = TokenBatchSampler(same_lengths, same_lengths, max_tokens=60, seed=0)
    again = TokenBatchSampler(same_lengths, same_lengths, max_tokens=60, seed=0)
    assert sampler.fingerprint(0) == again.fingerprint(0)
    assert sampler.fingerprint(1) != sampler.fingerprint(0)  # only the indices differ
    assert {len(b) for b in sampler.batches(0)} == {len(b) for b in sampler.batches(1)} == {10}
    in_order, cut_otherwise = (  # the same examples in the same order, in batches of 10 and 9
        TokenBatchSampler(same_lengths, same_lengths, max_tokens=n, shuffle=False) for n in (60, 54)
    )
    assert in_order.fingerprint(0) != cut_otherwise.fingerprint(0)


def test_every_process_of_a_run_has_the_epochs_one_fingerprint():
    """Only the first of torchrun's processes saves the checkpoint, so its print is every rank's
    on resume: the whole epoch's, not a rank's share (each rank warned of changed batches)."""
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, max_tokens=200, seed=3)
    ranks = [sampler.shard(rank, 2) for rank in (0, 1)]
    assert ranks[0].batches(0) != ranks[1].batches(0)
    assert ranks[0].fingerprint(0) == ranks[1].fingerprint(0) != ranks[0].fingerprint(1)
    odd = len(sampler.batches(0)) % 2 == 1  # a batch left over is no one's
    assert (ranks[0].fingerprint(0) == sampler.fingerprint(0)) != odd
    assert sampler.fingerprint(0) == sampler.shard(0, 1).fingerprint(0)  # one process as before


def test_fixed_seed_fixes_the_order_and_epoch_or_seed_changes_it():
    src, tgt = lengths()
    make = lambda seed: TokenBatchSampler(src, tgt, max_tokens=200, seed=seed)  # noqa: E731
    assert make(7).batches(0) == make(7).batches(0)
    assert make(7).batches(1) != make(7).batches(0)
    assert make(8).batches(0) != make(7).batches(0)
    sampler = make(7)
    first = sampler.batches(0)
    sampler.batches(1)
    assert sampler.batches(0) == first  # a pure function of (seed, epoch), not of call history
    unshuffled = TokenBatchSampler(src, tgt, max_tokens=200, shuffle=False)
    assert unshuffled.batches(0) == unshuffled.batches(5)


def test_iterate_resumes_mid_epoch():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, max_tokens=200, seed=1)
    full = list(sampler.iterate(2))
    assert full == sampler.batches(2) and sampler.num_batches(2) == len(full)
    assert list(sampler.iterate(2, start=5)) == full[5:]
    # A checkpoint written after an epoch's last batch resumes there: nothing left, no error
    assert list(sampler.iterate(2, start=len(full))) == []
    with pytest.raises(ValueError):
        list(sampler.iterate(2, start=len(full) + 1))


def test_shards_split_the_batches_evenly():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, max_tokens=200, seed=1)
    full = sampler.batches(0)
    shards = [sampler.shard(rank, 3).batches(0) for rank in range(3)]
    assert len({len(s) for s in shards}) == 1 and len(shards[0]) == len(full) // 3
    assert shards[1] == full[1 : len(full) // 3 * 3 : 3]
    flat = [i for shard in shards for batch in shard for i in batch]
    assert len(flat) == len(set(flat))  # no example on two ranks
    with pytest.raises(ValueError):
        sampler.shard(3, 3)


def test_too_long_examples_are_skipped_and_logged_once(caplog):
    with caplog.at_level(logging.WARNING, logger="transduce.data.batching"):
        sampler = TokenBatchSampler([3, 50, 4], [3, 4, 80], max_tokens=20)
        sampler.batches(0)
        sampler.batches(1)
    assert sampler.n_skipped == 2
    assert caplog.text.count("skipping 2 of 3") == 1
    assert [i for b in sampler.batches(0) for i in b] == [0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_moving_a_batch_to_a_gpu_does_not_wait_for_the_gpu():
    """The copy is queued behind the GPU's work instead of waiting for it: with half a second
    of work queued, moving a batch returns at once (from pageable memory it waited)."""
    batch = collate([([4, 5, 6], [7, 8]), ([9], [10, 11, 4])] * 100)
    batch.to("cuda")  # the pinned allocator's first block
    torch.cuda.synchronize()
    torch.cuda._sleep(1_000_000_000)  # ~0.5 s of GPU clock cycles
    start = time.perf_counter()
    moved = batch.to("cuda")
    queued = time.perf_counter() - start
    torch.cuda.synchronize()
    assert queued < 0.1 and torch.equal(moved.src.cpu(), batch.src)


def test_a_batch_knows_on_the_host_whether_any_source_is_padded():
    even = collate([([4, 5], [6]), ([7, 8], [9, 10, 11])], vocab_pad=PAD, bos=BOS, eos=EOS)
    uneven = collate([([4, 5], [6]), ([7], [9])], vocab_pad=PAD, bos=BOS, eos=EOS)
    assert not even.src_padded and uneven.src_padded
    assert not even.to("cpu").src_padded and uneven.to("cpu").src_padded
    # without counts (a batch built by hand) the tensors are counted
    assert Batch(uneven.src, uneven.tgt_in, uneven.tgt_out, PAD).src_padded


def test_a_batch_may_fill_its_budget_exactly():
    """The budget holds padding included and is inclusive: ten pairs of 9 tokens a side (10 with
    EOS or BOS) make one batch of max_tokens=100, not nine."""
    sampler = TokenBatchSampler([9] * 50, [9] * 50, max_tokens=100, seed=0)
    assert [len(batch) for batch in sampler.batches(0)] == [10] * 5


def test_the_batches_come_shuffled_not_in_length_order():
    """Sorted to cut, then shuffled: an epoch that went from short batches to long ones would
    change what the model learns from as it goes (and hit its memory peak at the end)."""
    src, tgt = lengths(2000, seed=1)
    sampler = TokenBatchSampler(src, tgt, max_tokens=400, seed=0)
    longest = [int(max(src[b].max(), tgt[b].max())) for b in sampler.batches(0)]
    assert longest != sorted(longest) and longest != sorted(longest, reverse=True)


def test_neither_side_pads_much_when_either_may_be_the_longer():
    """Sorted by the longer side first, then target, then source: where the target is 0.6-1.6x
    the source, each side pads under 10% (7.4% and 5.3% here); sorting by the target first padded
    the source 13.4%, by the source first the target 12.0%."""
    rng = np.random.default_rng(3)
    src = rng.integers(1, 60, 4000)
    tgt = np.clip((src * rng.uniform(0.6, 1.6, 4000)).astype(int), 1, None)
    sampler = TokenBatchSampler(src, tgt, max_tokens=600, seed=0)
    for side in (sampler.src, sampler.tgt):  # the lengths as batched, EOS or BOS counted
        padded = sum(int(side[b].max()) * len(b) for b in sampler.batches(0))
        assert 1 - side.sum() / padded < 0.10


@pytest.mark.parametrize("one_source_length", [False, True])
@pytest.mark.parametrize("width", [1, 4])
def test_the_cut_is_greedy_no_two_neighbouring_batches_would_fit_together(one_source_length, width):
    """A batch closes only when the next example would break the budget (or, with
    `one_source_length`, bring another source length), so updates are as full as the sort allows.
    Unshuffled, the batches come in sorted order: neighbours (of one source length) never fit
    the budget together, which a sort that scatters a source length over many batches breaks.
    The two sides' lengths are drawn apart, so that a long target may come before short ones."""
    src, tgt = np.random.default_rng(1).integers(0, 60, (2, 2000))
    sampler = TokenBatchSampler(
        src,
        tgt,
        max_tokens=400,
        bucket_width=width,
        shuffle=False,
        one_source_length=one_source_length,
    )
    groups = {}
    for batch in sampler.batches(0):  # each source length's batches, in order
        groups.setdefault(src[batch[0]] if one_source_length else None, []).append(batch)
    for group in groups.values():
        for first, second in itertools.pairwise(group):
            both = first + second
            assert max(src[both].max(), tgt[both].max()) + 1 > 400 // len(both), (first, second)


def test_a_length_that_fills_exactly_half_the_budget_keeps_its_batch_to_itself():
    """A length's sentences close their batch once they hold half the budget: four sources of
    2 tokens (eos counted) are 2 x 2 x 4 = 16 = the budget, so the next length's sentence, which
    would still fit (3 x 5 = 15), starts a batch of its own and the first batch stays unpadded.
    One sentence fewer (under half) joins the next length's batch, padded."""
    half = TokenBatchSampler(
        [1, 1, 1, 1, 2], [0] * 5, max_tokens=16, one_source_length=True, shuffle=False
    )
    assert half.batches(0) == [[0, 1, 2, 3], [4]]
    under = TokenBatchSampler(
        [1, 1, 1, 2], [0] * 4, max_tokens=16, one_source_length=True, shuffle=False
    )
    assert under.batches(0) == [[0, 1, 2, 3]]
