"""What a validation measures (training/validation.py): the dev loss of the model as it would
translate, every dev pair in it, batched under the run's budget and precision, and the task's
score of each dev line against its own reference."""

from __future__ import annotations

import re
from contextlib import contextmanager, nullcontext
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from transduce.config import override
from transduce.data.dataset import EncodedSplit
from transduce.models import build_model
from transduce.presets import tiny
from transduce.tasks import get_task
from transduce.training import validation

from .conftest import PLUMBING_MODEL, small_reverse_data

CPU = torch.device("cpu")


@pytest.fixture
def data(tmp_path):
    """The reversal task, 6 dev pairs (one fixture per test: some tests replace the dev split)."""
    return small_reverse_data(tmp_path)


def _config(**changes):
    return override(tiny(), PLUMBING_MODEL | {"train.valid_bleu": True} | changes)


def _model(config, data):
    torch.manual_seed(0)
    return build_model(config.model, data.vocab)


def _dev(data, pairs: list[tuple[list[int], list[int]]], lines: list[int]) -> None:
    data._splits["dev"] = EncodedSplit.from_sequences(
        [src for src, _ in pairs], [tgt for _, tgt in pairs], np.array(lines)
    )


def test_the_dev_loss_is_the_models_without_dropout_whatever_mode_it_is_handed_in(data):
    """The loop hands over its model in training mode: dropout must be off for the dev loss,
    else it is noisy and too high, and checkpoints are ranked by chance."""
    config = _config(**{"model.dropout": 0.5})
    model = _model(config, data)
    evaluated = validation.dev_loss(model.eval(), data, config, CPU, nullcontext)
    for _ in range(2):
        assert validation.dev_loss(model.train(), data, config, CPU, nullcontext) == evaluated


def test_a_dev_pair_whose_target_alone_is_longer_than_the_budget_is_scored(data):
    """The budget grows to the longest side of any pair, source or target: a short source with
    a long target (a parse tree, say) still counts, not skipped by the sampler."""
    config, split = _config(), data.split("dev")
    pairs = [tuple(side.tolist() for side in split.pair(i)) for i in range(len(split))]
    tall = (pairs[0][0][:2], pairs[0][1] * 6)  # a 2-token source, a target of over 12 tokens
    _dev(data, [*pairs, tall], [*split.index, len(split)])
    model, small = _model(config, data), _config(**{"data.max_tokens": 4})
    got = validation.dev_loss(model, data, small, CPU, nullcontext)
    assert got == pytest.approx(validation.dev_loss(model, data, config, CPU, nullcontext))


def test_the_dev_loss_is_batched_under_the_runs_token_budget(data, monkeypatch):
    """Not one pair at a time, which would cost a real dev set thousands of small forward
    passes: all 6 pairs fit one batch of 300 tokens, and a budget of the longest pair takes
    several."""
    batches, real = [], validation.model_loss

    def model_loss(model, batch, *args):
        batches.append(len(batch))
        return real(model, batch, *args)

    monkeypatch.setattr(validation, "model_loss", model_loss)
    model, longest = _model(_config(), data), int(data.split("dev").tgt_lengths.max()) + 1
    validation.dev_loss(model, data, _config(**{"data.max_tokens": 300}), CPU, nullcontext)
    assert batches == [6]
    batches.clear()
    validation.dev_loss(model, data, _config(**{"data.max_tokens": longest}), CPU, nullcontext)
    assert len(batches) > 1 and sum(batches) == 6


def test_the_dev_loss_runs_under_the_runs_autocast(data, monkeypatch):
    """On a GPU the run's autocast is bfloat16: the dev loss runs in it too, as training does,
    else validation takes float32's memory and time."""
    inside, seen = [False], []

    @contextmanager
    def autocast():
        inside[0] = True
        yield
        inside[0] = False

    real = validation.model_loss

    def model_loss(*args):
        seen.append(inside[0])
        return real(*args)

    monkeypatch.setattr(validation, "model_loss", model_loss)
    config = _config()
    validation.dev_loss(_model(config, data), data, config, CPU, autocast)
    assert seen and all(seen)


def test_a_validation_reports_loss_nll_ppl_and_the_tasks_score(data, monkeypatch):
    monkeypatch.setattr(validation, "dev_score", lambda *args: 12.5)
    config = _config()
    task = get_task(config.task)
    scores = validation.validate(_model(config, data), data, config, CPU, nullcontext, task)
    assert set(scores) == {"loss", "nll", "ppl", "bleu"} and scores["bleu"] == 12.5


def test_an_empty_dev_split_is_refused_naming_the_data_folder(data):
    _dev(data, [], [])
    config = _config()
    with pytest.raises(ValueError, match=re.escape(f"{data.path}: the dev split has no pairs")):
        validation.dev_loss(_model(config, data), data, config, CPU, nullcontext)


def test_each_dev_output_is_scored_against_its_own_lines_reference(data, monkeypatch):
    """Lines dropped by `prepare` (too long, empty) leave gaps: pair i is line `index[i]` of the
    dev text, and its output is post-processed with that line's source and scored against that
    line's reference. A model that outputs each reference scores 100. The search runs
    in-process."""
    split, text = data.split("dev"), data.text("dev")
    kept = [4, 1, 3]  # as if lines 0, 2 and 5 had been dropped, and out of order
    pairs = [tuple(side.tolist() for side in split.pair(i)) for i in kept]
    _dev(data, pairs, [split.index[i] for i in kept])
    targets, handed = {tuple(src): tgt for src, tgt in pairs}, []

    def decode_ids(model, vocab, sources, decode, device):  # outputs each pair's reference
        handed.append(decode)
        return [[SimpleNamespace(tokens=targets[tuple(src)])] for src in sources]

    monkeypatch.setattr(validation, "decode_ids", decode_ids)
    config, task = _config(), get_task(_config().task)
    seen = []
    real = task.postprocess

    def postprocess(outputs, sources):
        seen.extend(zip(outputs, sources, strict=True))
        return real(outputs, sources)

    monkeypatch.setattr(task, "postprocess", postprocess)
    score = validation.dev_score(_model(config, data), data, config, CPU, task)
    assert score == pytest.approx(100.0)
    lines = [int(split.index[i]) for i in kept]
    assert seen == [(text.tgt[line], text.src[line]) for line in lines]
    assert [decode.workers for decode in handed] == [1]  # no fork of a training process
