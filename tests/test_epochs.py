"""BPE-dropout: each epoch sees the training text segmented afresh, the same for the same seed
and epoch, and the training loop trains on that and resumes through it (data/epochs.py)."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch

from transduce.config import DataConfig
from transduce.data.batching import TokenBatchSampler
from transduce.data.corpus import LengthFilter
from transduce.data.dataset import EncodedSplit, PreparedData, prepare
from transduce.data.epochs import TrainingEpochs
from transduce.training import loop as loop_module
from transduce.training.checkpoint import CheckpointStore, load
from transduce.training.loop import Trainer

from .conftest import TOY_WORDS, write_lines
from .test_train import toy_config


@pytest.fixture(scope="module")
def words_data(tmp_path_factory) -> PreparedData:
    """200 pairs of TOY_WORDS sentences (the target reversed) under a 60-piece BPE, in which
    most words are several merges deep, so dropping merges shows."""
    folder = tmp_path_factory.mktemp("words")
    rng = random.Random(0)
    splits = {}
    for name, n in (("train", 200), ("dev", 6), ("test", 6)):
        src = [" ".join(rng.choices(TOY_WORDS, k=rng.randint(2, 6))) for _ in range(n)]
        tgt = [" ".join(reversed(line.split())) for line in src]
        splits[name] = (
            write_lines(folder / f"{name}.src", src),
            write_lines(folder / f"{name}.tgt", tgt),
        )
    return prepare(
        splits, folder / "data", vocab_size=60, length_filter=LengthFilter(), description={}
    )


def _epochs(data: PreparedData, dropout: float, seed: int = 0) -> TrainingEpochs:
    batching = DataConfig(max_tokens=200, bpe_dropout=dropout)
    return TrainingEpochs(data.split("train"), data.vocab, batching, seed=seed)


def _ids(split, i):
    return tuple(tuple(side.tolist()) for side in split.pair(i))


def test_without_dropout_every_epoch_is_prepares_segmentation(words_data):
    epochs, train = _epochs(words_data, 0.0), words_data.split("train")
    assert epochs.split(0) is train and epochs.split(3) is train
    sampler = TokenBatchSampler(train.src_lengths, train.tgt_lengths, max_tokens=200, seed=0)
    for epoch in (0, 1):
        expected = [train.pairs(indices) for indices in sampler.batches(epoch)]
        got = list(epochs.batches(epoch))
        assert [[_flat(p) for p in batch] for batch in got] == [
            [_flat(p) for p in batch] for batch in expected
        ]


def _flat(pair):
    return tuple(pair[0].tolist()), tuple(pair[1].tolist())


def test_each_epoch_is_the_same_text_in_new_pieces(words_data):
    epochs, train, vocab = _epochs(words_data, 0.2), words_data.split("train"), words_data.vocab
    first, second = epochs.split(0), epochs.split(1)
    for split in (first, second):
        assert np.array_equal(split.index, train.index)
        for side in (0, 1):  # pair i is still pair i, as text
            texts = vocab.decode(split.pair(i)[side] for i in range(len(split)))
            assert texts == vocab.decode(train.pair(i)[side] for i in range(len(train)))
        assert len(split.src_ids) > len(train.src_ids) and len(split.tgt_ids) > len(train.tgt_ids)
    assert [_ids(first, i) for i in range(len(first))] != [_ids(second, i) for i in range(200)]
    # the batches cut this epoch's lengths: every pair once, each within the budget
    batches = epochs.sampler(1).batches(1)
    assert sorted(i for batch in batches for i in batch) == list(range(len(second)))
    for batch in batches:
        assert len(batch) * (second.tgt_lengths[batch].max() + 1) <= 200


def test_an_epoch_is_a_pure_function_of_seed_and_epoch(words_data):
    walked = _epochs(words_data, 0.2)
    for epoch in range(3):  # walked through in order, as a run does
        walked.split(epoch)
    jumped = _epochs(words_data, 0.2).split(2)  # straight to epoch 2, as a resumed run does
    assert [_ids(jumped, i) for i in range(200)] == [_ids(walked.split(2), i) for i in range(200)]
    other = _epochs(words_data, 0.2, seed=1).split(2)
    assert [_ids(other, i) for i in range(200)] != [_ids(jumped, i) for i in range(200)]


def test_each_process_takes_its_own_share_of_an_epochs_batches(words_data):
    train, vocab, batching = words_data.split("train"), words_data.vocab, DataConfig(max_tokens=200)
    whole = TrainingEpochs(train, vocab, batching, seed=0).sampler(1).batches(1)
    usable = len(whole) // 2 * 2  # every process gets as many
    for rank in (0, 1):
        share = TrainingEpochs(train, vocab, batching, seed=0, rank=rank, world=2)
        assert share.sampler(1).batches(1) == whole[rank:usable:2]


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_an_epochs_count_and_fingerprint_are_those_of_its_own_batches(words_data, dropout):
    # wide buckets: the order within one, and so the count, changes from epoch to epoch
    batching = DataConfig(max_tokens=60, bucket_width=8, bpe_dropout=dropout)
    epochs = TrainingEpochs(words_data.split("train"), words_data.vocab, batching, seed=0)
    fingerprints = set()
    for epoch in (2, 0, 1):
        assert epochs.sampler(epoch).bucket_width == 8
        assert epochs.num_batches(epoch) == len(list(epochs.batches(epoch)))
        fingerprints.add(epochs.fingerprint(epoch))
        # a digest of this epoch's batches, cut from this epoch's segmentation, not another's
        split = epochs.split(epoch)
        own = TokenBatchSampler(split.src_lengths, split.tgt_lengths, max_tokens=60, bucket_width=8)
        assert epochs.fingerprint(epoch) == own.fingerprint(epoch)
    assert len(fingerprints) == 3  # each epoch's order is its own


def test_the_two_sides_drop_merges_of_their_own_and_keep_their_line_numbers(words_data):
    """A seed per side: a pair whose two sides are one text is cut two ways. Even a small
    dropout resegments."""
    train = words_data.split("train")
    sources = [train.pair(i)[0] for i in range(len(train))]
    twins = EncodedSplit.from_sequences(sources, sources, train.index[::-1].copy())
    dropout = DataConfig(max_tokens=200, bpe_dropout=0.05)
    split = TrainingEpochs(twins, words_data.vocab, dropout, seed=0).split(0)
    assert np.array_equal(split.index, twins.index)
    assert any(not np.array_equal(*split.pair(i)) for i in range(len(split)))


# --- the training loop's wiring ------------------------------------------------------------

WORDS_RUN = {"data.max_tokens": 400, "train.valid_every": 10, "train.valid_bleu": False}


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_the_loop_trains_on_each_epochs_segmentation(words_data, tmp_path, monkeypatch, dropout):
    """What train_step is handed: the training text, in `prepare`'s pieces without BPE-dropout
    and in other pieces with it."""
    handed = []
    real = loop_module.train_step

    def recording(network, optimizer, batches, **kwargs):
        handed.extend(batches)
        return real(network, optimizer, batches, **kwargs)

    monkeypatch.setattr(loop_module, "train_step", recording)
    config = toy_config(**WORDS_RUN, **{"data.bpe_dropout": dropout, "train.max_steps": 24})
    Trainer(config, words_data, tmp_path / "run", False, torch.device("cpu")).run()
    vocab = words_data.vocab
    text = set(vocab.decode(words_data.split("train").pair(i)[1] for i in range(200)))
    rows = [row[row != vocab.pad].tolist()[:-1] for b in handed for row in b.tgt_out]  # no eos
    assert len(rows) > 200  # more than one epoch
    assert set(vocab.decode(rows)) <= text
    as_prepared = sum(row == vocab.encode(vocab.decode([row]))[0] for row in rows)
    if dropout == 0:
        assert as_prepared == len(rows)
    else:
        assert as_prepared < 0.8 * len(rows)


def test_a_resumed_run_with_bpe_dropout_ends_where_an_uninterrupted_one_does(words_data, tmp_path):
    """Stopped in the middle of the third epoch, resumed: the epochs from there on must be
    segmented as they would have been, not by whatever state the new process has."""
    settings = WORDS_RUN | {"data.bpe_dropout": 0.2}
    config = toy_config(**settings)
    train, seed = words_data.split("train"), config.train.seed
    epochs = TrainingEpochs(train, words_data.vocab, config.data, seed=seed)
    stop = epochs.num_batches(0) + epochs.num_batches(1) + 2
    end = stop + epochs.num_batches(2)  # into the fourth epoch
    straight, again, resumed = straight_and_resumed(words_data, tmp_path, settings, stop, end)
    assert (resumed.epoch, resumed.batch_in_epoch) == (2, 2)
    assert straight["progress"]["epoch"] == 3
    for name, tensor in straight["model"].items():
        assert torch.equal(tensor, again["model"][name]), name


def straight_and_resumed(data, tmp_path, settings: dict, stop: int, end: int):
    """A run of `end` updates, and one stopped after `stop` and resumed to `end`: the two
    checkpoints of update `end`, and the progress the resumed run began from."""
    cpu, total = torch.device("cpu"), {"train.max_steps": end}
    Trainer(toy_config(**settings | total), data, tmp_path / "straight", False, cpu).run()
    stopped = toy_config(**settings | {"train.max_steps": stop})
    Trainer(stopped, data, tmp_path / "stopped", False, cpu).run()
    resumed = Trainer(toy_config(**settings | total), data, tmp_path / "stopped", True, cpu)
    began = dataclasses.replace(resumed.progress)
    resumed.run()
    straight = load(CheckpointStore(tmp_path / "straight", 3).path(end))
    return straight, load(CheckpointStore(tmp_path / "stopped", 3).path(end)), began


def test_a_run_resumed_on_other_batches_than_its_own_says_so_and_goes_on(words_data, caplog):
    """A checkpoint keeps the fingerprint of its epoch's batches: resumed on the same batches,
    the run goes on with the next one and says nothing; on others (the batching changed since,
    as in session 37), it warns that the rest of that epoch is not the rest it was cut with, and
    a position past the new epoch's end ends that epoch rather than failing."""
    from transduce.training.resume import Progress, update_groups

    def ids(group) -> list:
        return [[(x.tolist(), y.tolist()) for x, y in pairs] for pairs in group]

    def epochs(seed: int) -> TrainingEpochs:
        return TrainingEpochs(train, words_data.vocab, DataConfig(max_tokens=100), seed=seed)

    train = words_data.split("train")
    own, saved = epochs(0), Progress()
    used = update_groups(own, saved, accumulate=1, max_epochs=2)
    for _ in range(3):
        next(used)
    assert saved.batches == own.fingerprint(0) != epochs(1).fingerprint(0)
    with caplog.at_level("WARNING"):
        resumed = next(update_groups(own, Progress(**vars(saved)), 1, 2))
        assert not caplog.records
        assert ids(resumed) == ids([next(own.batches(0, 3))])
        next(update_groups(epochs(1), Progress(**vars(saved)), 1, 2))
        assert "epoch 0's batches differ" in caplog.text
        past_the_end = Progress(**vars(saved) | {"batch_in_epoch": own.num_batches(0) + 5})
        other = epochs(1)
        first = next(update_groups(other, past_the_end, 1, 2))
    assert past_the_end.epoch == 1 and ids(first) == ids([next(other.batches(1))])
    caplog.clear()
    finished = Progress()
    for _ in update_groups(own, finished, 1, max_epochs=1):  # its last checkpoint: epoch 1, 0
        pass
    with caplog.at_level("WARNING"):
        next(update_groups(own, finished, 1, max_epochs=2))  # `--set train.max_epochs` raised
    assert not caplog.records


def test_bpe_dropout_refuses_several_training_processes(words_data):
    """Each process would segment the epoch its own way (sentencepiece's sampling is not fixed
    by its seed across processes), and the shares of the batches would overlap."""
    dropout = DataConfig(max_tokens=200, bpe_dropout=0.1)
    with pytest.raises(ValueError, match=r"data\.bpe_dropout needs one training process"):
        TrainingEpochs(words_data.split("train"), words_data.vocab, dropout, seed=0, world=2)
    TrainingEpochs(words_data.split("train"), words_data.vocab, DataConfig(), seed=0, world=2)


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_over_long_examples_are_warned_about_once_a_run_not_every_epoch(
    words_data, caplog, dropout
):
    """Under BPE-dropout each epoch builds its own sampler; only the first warns."""
    epochs = TrainingEpochs(
        words_data.split("train"),
        words_data.vocab,
        DataConfig(max_tokens=12, bpe_dropout=dropout),
        seed=0,
    )
    with caplog.at_level("DEBUG", logger="transduce.data.batching"):
        skipped = [epochs.sampler(epoch).n_skipped for epoch in range(4)]
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "skipping" in r.message]
    assert all(n > 0 for n in skipped) and len(warnings) == 1
    if dropout:  # the later epochs' counts are still logged, at debug level
        assert sum("skipping" in r.message for r in caplog.records) == 4


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_the_paper_presets_batches_hold_one_source_length(words_data, dropout):
    """`base`, `big` and Table 3's rows batch sources of one length (`PAPER_BATCHES`), so that a
    GPU attends without a mask; the epochs hand that setting to the sampler, BPE-dropout's fresh
    segmentations included. `tiny`'s batches mix lengths (a CPU gains nothing by it). Not all of
    a paper preset's batches hold one length: this corpus is small, and a length's last few
    sentences share a batch with the next length's (at WMT14's size 98% hold one)."""
    from transduce.presets import preset

    unpadded = {}
    for name, one_length in (("base", True), ("big", True), ("B1", True), ("tiny", False)):
        batching = dataclasses.replace(preset(name).data, max_tokens=200, bpe_dropout=dropout)
        epochs = TrainingEpochs(words_data.split("train"), words_data.vocab, batching, seed=0)
        assert epochs.sampler(1).one_source_length == one_length, name
        lengths = [{len(src) for src, _ in batch} for batch in epochs.batches(1)]
        unpadded[name] = sum(len(one) == 1 for one in lengths) / len(lengths)
    assert unpadded["base"] - unpadded["tiny"] > 0.1  # 0.24-0.59 against 0-0.06, seen
