"""Bidirectional training (training/both_ways.py): the first epochs see each pair as it is and
reversed, the loop trains on them for its share of the budget and then on the pairs one way,
and a run resumed inside such an epoch finishes it both ways."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from transduce.config import DataConfig
from transduce.data.epochs import TrainingEpochs
from transduce.training import loop as loop_module
from transduce.training.loop import Trainer

from .test_epochs import WORDS_RUN, straight_and_resumed, words_data  # noqa: F401
from .test_train import toy_config


def _pair(split, i) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(split.pair(i)[0].tolist()), tuple(split.pair(i)[1].tolist())


def test_both_ways_holds_each_pair_as_it_is_then_reversed(words_data):  # noqa: F811
    train = words_data.split("train")
    both, n = train.both_ways(), len(train)
    assert len(both) == 2 * n
    assert [_pair(both, i) for i in range(n)] == [_pair(train, i) for i in range(n)]
    assert [_pair(both, n + i) for i in range(n)] == [_pair(train, i)[::-1] for i in range(n)]
    assert np.array_equal(both.index, np.concatenate([train.index, train.index]))
    assert np.array_equal(both.src_lengths[n:], train.tgt_lengths)


def _texts(vocab, pairs) -> Counter:
    return Counter((vocab.decode([x])[0], vocab.decode([y])[0]) for x, y in pairs)


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_the_epochs_before_both_ways_epochs_see_every_pair_both_ways(words_data, dropout):  # noqa: F811
    """Each pair and its reverse once an epoch, in batches cut from those lengths; after that
    epoch, each pair once, as it is (with BPE-dropout, in that epoch's pieces)."""
    vocab, train = words_data.vocab, words_data.split("train")
    forward = Counter(
        (vocab.decode([x])[0], vocab.decode([y])[0]) for x, y in train.pairs(range(200))
    )
    backward = Counter({(y, x): count for (x, y), count in forward.items()})
    epochs = TrainingEpochs(train, vocab, DataConfig(max_tokens=200, bpe_dropout=dropout), seed=0)
    epochs.both_ways_epochs = 2
    for epoch in (0, 1):
        batches = list(epochs.batches(epoch))
        assert len(batches) == epochs.num_batches(epoch)
        assert _texts(vocab, [p for b in batches for p in b]) == forward + backward
        split = epochs.split(epoch)
        assert len(split) == 400  # the batches are cut from the 400 pairs' lengths, each once
        assert sorted(i for b in epochs.sampler(epoch).batches(epoch) for i in b) == list(
            range(400)
        )
    one_way = [p for b in epochs.batches(2) for p in b]
    assert _texts(vocab, one_way) == forward and len(epochs.split(2)) == 200


def test_the_loop_trains_both_ways_for_its_share_of_the_budget_then_one_way(
    words_data,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """What train_step is handed: reversed pairs (sources in the target's word order) in the
    epochs begun within the first half of 30 updates, none after; and where the run stands."""
    handed: list[tuple[int, list]] = []  # (update, the update's batches)
    real = loop_module.train_step

    def recording(network, optimizer, batches, **kwargs):
        handed.append((len(handed) + 1, batches))
        return real(network, optimizer, batches, **kwargs)

    monkeypatch.setattr(loop_module, "train_step", recording)
    settings = WORDS_RUN | {"train.both_ways": 0.5, "train.max_steps": 30}
    trainer = Trainer(
        toy_config(**settings), words_data, tmp_path / "run", False, torch.device("cpu")
    )
    trainer.run()
    vocab = words_data.vocab
    sources = {vocab.decode([x])[0] for x, _ in words_data.split("train").pairs(range(200))}
    train, config = words_data.split("train"), trainer.config
    epochs = TrainingEpochs(train, vocab, config.data, seed=config.train.seed)
    epochs.both_ways_epochs = trainer.progress.both_ways_epochs
    first = [epochs.num_batches(e) for e in range(epochs.both_ways_epochs)]
    starts = np.cumsum([0, *first])  # the update before each epoch's first
    assert all(start < 15 for start in starts[:-1]) and starts[-1] >= 15  # begun in the half
    for update, batches in handed:
        rows = [row[row != vocab.pad].tolist()[:-1] for b in batches for row in b.src]  # no eos
        reversed_rows = sum(text not in sources for text in vocab.decode(rows))
        if update <= starts[-1]:
            assert reversed_rows > 0, update  # ~half of each batch
        else:
            assert reversed_rows == 0, update
    assert len(handed) == 30 > starts[-1] + 1


def test_a_run_resumed_inside_a_both_ways_epoch_ends_where_an_uninterrupted_one_does(
    words_data,  # noqa: F811
    tmp_path,
):
    """Stopped after 3 updates of its first epoch (both ways), resumed: the rest of that epoch
    must be the rest of the both-ways batches, as its checkpoint's progress says."""
    settings = WORDS_RUN | {"train.both_ways": 0.3}
    config = toy_config(**settings)
    epochs = TrainingEpochs(
        words_data.split("train"), words_data.vocab, config.data, seed=config.train.seed
    )
    epochs.both_ways_epochs = 1
    stop, end = 3, epochs.num_batches(0) + 4
    straight, again, resumed = straight_and_resumed(words_data, tmp_path, settings, stop, end)
    assert (resumed.epoch, resumed.both_ways_epochs) == (0, 1)
    assert straight["progress"]["both_ways_epochs"] == again["progress"]["both_ways_epochs"]
    for name, tensor in straight["model"].items():
        assert torch.equal(tensor, again["model"][name]), name
