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


def _result(model: str, seed: int, score: float, updates: int, checkpoint: str, signature: str):
    return compare_module.RunResult(
        model=model, seed=seed, parameters=1_250_000, updates=updates,
        tokens_per_second=1000.0 * seed, test_score=score, signature=signature, metric="bleu",
        curve=[(0.5, score / 2), (1.0, score)], checkpoint=checkpoint,
    )  # fmt: skip


def test_the_table_gives_each_model_its_mean_and_sample_sd_over_seeds_in_the_order_run(tmp_path):
    results = [
        _result("tiny", 1, 30.0, 100, "average.pt", "sig-b"),
        _result("tiny", 2, 32.0, 300, "step-000020.pt", "sig-b"),
        _result("rnn-tiny", 1, 20.0, 50, "average.pt", "sig-a"),
    ]
    compare_module.write_report(results, tmp_path)
    text = (tmp_path / "results.md").read_text()
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ")]
    assert [[cell.strip() for cell in row] for row in rows[1:]] == [
        ["tiny", "1.25M", "2", "200", "1,500", "31.00 ± 1.41", "average.pt, step-000020.pt"],
        ["rnn-tiny", "1.25M", "1", "50", "1,000", "20.00 (one seed)", "average.pt"],
    ]  # the stdev of 30 and 32 over n - 1: 1.41; over n it would be 1.00
    assert text.endswith("\n\nscored with sig-a; sig-b\n")
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [(r["model"], r["seed"], r["test_score"]) for r in saved] == [
        ("tiny", 1, 30.0), ("tiny", 2, 32.0), ("rnn-tiny", 1, 20.0)
    ]  # fmt: skip
    assert (tmp_path / "curve.png").stat().st_size > 5000


def test_a_runs_seed_and_minutes_are_set_and_its_own_assignments_win_over_them():
    config = compare_module._config("tiny", 3, 1.5, ["train.max_steps=50", "model.dropout=0.0"])
    assert (config.train.seed, config.train.max_minutes) == (3, 1.5)
    assert (config.train.max_steps, config.model.dropout) == (50, 0.0)
    assert compare_module._config("tiny", 2, 1.5, []).train.max_steps == 10**9  # minutes decide


def test_a_finished_runs_numbers_come_from_its_log_and_its_saved_test_score(
    data, tmp_path, monkeypatch
):
    """Nothing trains or translates again: the averaged model and test-score.json exist."""
    (tmp_path / compare_module.AVERAGE_FILE).write_bytes(b"")
    score = {"split": "test", "score": 12.5, "signature": "sig", "checkpoint": "step-000009.pt"}
    (tmp_path / "test-score.json").write_text(json.dumps(score))
    log = [
        {"kind": "train", "step": 3, "elapsed": 30.0, "tgt_tokens_per_s": 100.0},
        {"kind": "valid", "step": 3, "elapsed": 36.0, "bleu": 1.5},
        {"kind": "train", "step": 6, "elapsed": 60.0, "tgt_tokens_per_s": 400.0},
        {"kind": "valid", "step": 6, "elapsed": 72.0, "ppl": 9.0},  # not scored: no point
        {"kind": "train", "step": 9, "elapsed": 90.0, "tgt_tokens_per_s": 200.0},
        {"kind": "valid", "step": 9, "elapsed": 96.0, "bleu": 4.0},
        {"kind": "train", "step": 10, "elapsed": 99.0, "tgt_tokens_per_s": 900.0},  # cut short
    ]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))

    def nothing_again(*args, **kwargs):
        raise AssertionError("a finished run was trained or translated again")

    monkeypatch.setattr(compare_module, "train", nothing_again)
    monkeypatch.setattr(compare_module.Translator, "load", nothing_again)
    config = compare_module._config("tiny", 1, 0.5, as_set_arguments(PLUMBING_MODEL))
    result = compare_module._run(config, "tiny", 1, data, tmp_path, None)
    assert (result.test_score, result.checkpoint) == (12.5, "step-000009.pt")
    assert result.signature == "sig"
    assert result.updates == 10  # the last step logged, whatever its kind
    assert result.tokens_per_second == 300.0  # the median window, not the mean 400
    assert [(pytest.approx(m), bleu) for m, bleu in result.curve] == [(0.6, 1.5), (1.6, 4.0)]
    assert result.metric == "bleu" and result.parameters > 0


def test_each_model_of_the_pair_runs_seeds_1_to_n_with_its_own_assignments_only(
    data, tmp_path, monkeypatch
):
    runs = []

    def scripted_run(config, name, seed, data, run_dir, device):
        runs.append((name, config.train.seed, config.train.label_smoothing, run_dir.name))
        return _result(name, seed, 30.0, 10, "average.pt", "sig")

    monkeypatch.setattr(compare_module, "_run", scripted_run)
    overrides = {"rnn-tiny": ["train.label_smoothing=0.0"]}
    compare(data.path, tmp_path, minutes=0.5, seeds=2, overrides=overrides)
    assert runs == [
        ("tiny", 1, 0.1, "tiny-seed1"), ("tiny", 2, 0.1, "tiny-seed2"),
        ("rnn-tiny", 1, 0.0, "rnn-tiny-seed1"), ("rnn-tiny", 2, 0.0, "rnn-tiny-seed2"),
    ]  # fmt: skip
    runs.clear()
    compare(data.path, tmp_path, minutes=0.5, size="small")
    assert [name for name, *_ in runs] == ["small", "rnn-small"]


class Scripted:
    """A translator whose best output for each source line is scripted."""

    def __init__(self, outputs: dict[str, str]):
        self.outputs = outputs

    def translate(self, lines, decode=None):
        return [[(self.outputs[line], -1.0), ("not the best", -2.0)] for line in lines]


def test_the_split_asked_for_is_written_scored_and_named(data, tmp_path):
    text = data.text("dev")
    perfect = Scripted(dict(zip(text.src, text.tgt, strict=True)))
    score = compare_module.translate_and_score(perfect, data, "dev", tmp_path)
    assert score["split"] == "dev" and score["score"] == pytest.approx(100.0)
    assert "tok:13a" in score["signature"]
    assert (tmp_path / "dev.hyp").read_text().splitlines() == text.tgt  # the best of each n-best


def test_the_test_set_is_scored_once_with_the_tasks_search_and_the_score_kept(
    data, tmp_path, monkeypatch
):
    chosen = (tmp_path / "step-000009.pt", {"average.pt": 2.0, "step-000009.pt": 1.0})
    monkeypatch.setattr(compare_module, "dev_chosen_checkpoint", lambda *args: chosen)
    monkeypatch.setattr(compare_module.Translator, "load", lambda run_dir, path, device: path.name)
    calls = []

    def scored(translator, data, split, out, search):
        calls.append((translator, split, search))
        return {"split": split, "score": 1.0, "signature": "sig"}

    monkeypatch.setattr(compare_module, "translate_and_score", scored)
    first = compare_module._test_score(tmp_path, data, None)
    assert compare_module._test_score(tmp_path, data, None) == first  # read back, not redone
    assert calls == [("step-000009.pt", "test", DecodeConfig())]  # the task's s6.1 search
    assert first == {"split": "test", "score": 1.0, "signature": "sig",
                     "checkpoint": "step-000009.pt", "dev_nll": chosen[1]}  # fmt: skip
