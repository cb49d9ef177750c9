"""`transduce compare`: both models trained on the same data for the same time, scored the same
way, written as a table and a plot; a second call trains nothing again."""

import json
from pathlib import Path

import pytest

from transduce.config import DecodeConfig
from transduce.experiments import compare as compare_module
from transduce.experiments.compare import compare
from transduce.presets import preset

from .conftest import PLUMBING_MODEL, as_set_arguments, small_reverse_data

SMALL_RNN = {"model.n_layers": 1, "model.d_model": 16, "model.d_embed": 16, "data.max_tokens": 300}
QUICK = {"train.valid_every": 3, "train.keep_last": 2, "train.average_last": 2}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return small_reverse_data(tmp_path_factory.mktemp("compare"))


def test_both_models_are_trained_scored_and_reported_and_not_trained_twice(
    data, tmp_path, monkeypatch
):
    overrides = {
        "tiny": as_set_arguments(PLUMBING_MODEL | QUICK),
        "rnn-tiny": as_set_arguments(SMALL_RNN | QUICK),
    }
    searches, real_translate = [], compare_module.Translator.translate

    def recording_translate(self, lines, decode=None):
        searches.append(decode or self.decode)
        return real_translate(self, lines, decode)

    monkeypatch.setattr(compare_module.Translator, "translate", recording_translate)
    results = compare(data.path, tmp_path, minutes=0.02, seeds=2, overrides=overrides)
    # Both models search alike, with the task's s6.1 settings, though `tiny` has its own alpha.
    assert preset("tiny").decode.alpha != 0.6
    assert searches == [DecodeConfig()] * 4
    assert [(r.model, r.seed) for r in results] == [
        ("tiny", 1), ("tiny", 2), ("rnn-tiny", 1), ("rnn-tiny", 2)
    ]  # fmt: skip
    for r in results:
        assert r.updates > 0 and r.parameters > 0 and r.curve and r.metric == "bleu"
        assert "tok:13a" in r.signature and 0.0 <= r.test_score <= 100.0
    table = (tmp_path / "results.md").read_text()
    assert "| tiny |" in table and "| rnn-tiny |" in table and "±" in table
    assert (tmp_path / "curve.png").stat().st_size > 5000
    assert len(json.loads((tmp_path / "results.json").read_text())) == 4
    # The seeds differ: different initialisations, different curves.
    assert results[0].curve != results[1].curve or results[0].updates != results[1].updates

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(compare_module, "train", no_training)
    again = compare(data.path, tmp_path, minutes=0.02, seeds=2, overrides=overrides)
    assert [r.test_score for r in again] == [r.test_score for r in results]


@pytest.mark.parametrize("lower", ["average", "last"])
def test_the_test_set_is_translated_with_the_checkpoint_of_lower_dev_nll(
    data, tmp_path, monkeypatch, lower
):
    overrides = {
        "tiny": as_set_arguments(PLUMBING_MODEL | QUICK),
        "rnn-tiny": as_set_arguments(SMALL_RNN | QUICK),
    }
    compare(data.path, tmp_path, minutes=0.01, seeds=1, overrides=overrides)
    run = tmp_path / "rnn-tiny-seed1"
    (run / "test-score.json").unlink()  # score it again, with scripted dev NLLs
    nlls = iter([1.0, 2.0] if lower == "average" else [2.0, 1.0])  # average.pt is asked first
    monkeypatch.setattr(compare_module, "dev_loss", lambda *args: {"nll": next(nlls)})
    loaded = []
    real_load = compare_module.Translator.load

    def spy(run_dir, checkpoint=None, *args, **kwargs):
        loaded.append(checkpoint)
        return real_load(run_dir, checkpoint, *args, **kwargs)

    monkeypatch.setattr(compare_module.Translator, "load", spy)
    results = compare(data.path, tmp_path, minutes=0.01, seeds=1, overrides=overrides)
    newest = sorted((run / "checkpoints").iterdir())[-1].name
    expected = "average.pt" if lower == "average" else newest
    assert [Path(c).name for c in loaded] == [expected]
    assert results[1].checkpoint == expected
    table = (tmp_path / "results.md").read_text()
    assert f"| {expected} |" in table and "(one seed) |" in table and "± 0.00" not in table


@pytest.mark.parametrize("size", sorted(compare_module.PAIRS))
def test_the_models_of_a_pair_train_on_the_same_batch_budget(size):
    """The comparison's premise (s7: the same data and batch budget): a preset whose batch size
    changes drags its recurrent partner along, or the pair measures the batches, not attention."""
    transformer, recurrent = (preset(name) for name in compare_module.PAIRS[size])
    assert transformer.data.max_tokens == recurrent.data.max_tokens
