"""`transduce demo` end to end (experiments/demo.py), with its corpus, trainer and translator
faked: what it prepares, where it trains, what it translates, and the scores it writes.

The scores are sacreBLEU's own on fixed strings (the golden numbers of an outside source).
"""

import json
import logging
from pathlib import Path

import sacrebleu

import transduce.experiments.demo as demo
import transduce.tasks.metrics as metrics
from transduce.config import override, parse_assignments
from transduce.data.corpus import LengthFilter
from transduce.presets import preset
from transduce.tasks.translation import scoring

SOURCES = ["ein hund .", "zwei katzen .", "ein haus ."]
REFERENCES = ["a dog runs .", "two cats sleep .", "a house ."]
# Each sentence's n-best, best first: the demo keeps the first.
N_BEST = [["a dog runs .", "a dog"], ["two cat sleep .", "cats"], ["the house .", "house"]]


class _Split:
    src, tgt = SOURCES, REFERENCES


def _fake_run(tmp_path: Path, monkeypatch, hypotheses=N_BEST, **options) -> dict:
    """Runs the demo into tmp_path/"demo" and returns what each fake was handed."""
    seen = {"splits": []}

    class Data:
        path = tmp_path / "prepared"

        def text(self, split):
            seen["splits"].append(split)
            return _Split()

    class Translator:
        @staticmethod
        def load(run_dir, device=None):
            seen["translator"] = (run_dir, device)
            return Translator()

        def translate(self, lines):
            assert lines == SOURCES
            return [[(text, -1.0 - i) for i, text in enumerate(hyps)] for hyps in hypotheses]

    def train(config, data_path, run_dir, device=None):
        seen["train"] = (config, data_path, run_dir, device, sorted(run_dir.glob("*")))
        (run_dir / "checkpoints").mkdir(parents=True)

    def prepare(files, folder, **settings):
        seen["prepare"] = (files, folder, settings)
        return Data()

    monkeypatch.setattr(demo, "corpus_files", lambda *a, **k: seen.update(corpus=(a, k)) or "F")
    monkeypatch.setattr(demo, "prepare", prepare)
    monkeypatch.setattr(demo, "train", train)
    monkeypatch.setattr(demo, "Translator", Translator)
    seen["summary"] = demo.run_demo(tmp_path / "data", tmp_path / "demo", **options)
    return seen


def test_the_demo_prepares_multi30k_in_the_direction_asked_with_10000_pieces(tmp_path, monkeypatch):
    seen = _fake_run(tmp_path, monkeypatch, minutes=3, src="de", tgt="en", variant="tok")
    corpus_args = (("multi30k", "de", "en"), {"variant": "tok", "data_dir": tmp_path / "data"})
    assert seen["corpus"] == corpus_args
    files, folder, settings = seen["prepare"]
    assert (files, folder) == ("F", tmp_path / "demo" / "data")
    assert settings == {
        "vocab_size": 10000,
        "length_filter": LengthFilter(),
        "description": {"corpus": "multi30k", "variant": "tok", "src": "de", "tgt": "en"},
        "task": scoring(True),  # the tok variant is lowercased and tokenized already
    }
    raw = _fake_run(tmp_path, monkeypatch, minutes=3, variant="raw")["prepare"][2]
    assert raw["task"] == scoring(False)


def test_a_demo_trains_afresh_in_its_run_folder_with_the_overrides_on_the_device_asked(
    tmp_path, monkeypatch
):
    stale = tmp_path / "demo" / "run" / "checkpoints" / "step_00000100.pt"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"an earlier demo's checkpoint")
    options = {"preset_name": "tiny", "overrides": ["train.seed=7"], "device": "cpu"}
    seen = _fake_run(tmp_path, monkeypatch, minutes=3, **options)  # the preset named, not `demo`
    config, *where, found = seen["train"]
    run_dir = tmp_path / "demo" / "run"
    assert where == [tmp_path / "prepared", run_dir, "cpu"] and found == []  # the old run gone
    budget = {"train.max_minutes": 3, "train.max_steps": 10**9}
    assert config == override(override(preset("tiny"), budget), parse_assignments(["train.seed=7"]))
    assert seen["translator"] == (run_dir, "cpu")


def test_the_demo_writes_each_test_sentences_best_translation_on_its_own_line(
    tmp_path, monkeypatch
):
    seen = _fake_run(tmp_path, monkeypatch, minutes=3)
    assert seen["splits"] == ["test"]
    hypotheses = (tmp_path / "demo" / "test.hyp").read_text(encoding="utf-8")
    assert hypotheses == "a dog runs .\ntwo cat sleep .\nthe house .\n"


def test_the_demo_scores_bleu_both_ways_and_chrf_and_saves_them_with_their_signatures(
    tmp_path, monkeypatch
):
    summary = _fake_run(tmp_path, monkeypatch, minutes=3)["summary"]
    best = [hyps[0] for hyps in N_BEST]
    expected = {
        "bleu": sacrebleu.BLEU(),
        "bleu_lowercase_tokenized": sacrebleu.BLEU(tokenize="none", lowercase=True),
        "chrf": sacrebleu.CHRF(),
    }
    assert summary.keys() == expected.keys()
    for name, metric in expected.items():
        score = metric.corpus_score(best, [REFERENCES]).score
        assert summary[name] == {"score": score, "signature": str(metric.get_signature())}
    assert json.loads((tmp_path / "demo" / "scores.json").read_text()) == summary
    # chrF weighs recall over precision: swapping hypotheses and references changes it
    assert summary["chrf"]["score"] != sacrebleu.CHRF().corpus_score(REFERENCES, [best]).score


def test_the_tok_variants_tokenized_output_draws_no_hint_to_detokenize(
    tmp_path, monkeypatch, caplog
):
    """Multi30k's tok text ends in " ." on purpose; sacreBLEU's hint is for raw text tokenized by
    mistake."""
    monkeypatch.setattr(metrics, "TOKENIZED_PERIODS", len(N_BEST))  # every line ends in " ."
    with caplog.at_level(logging.WARNING, logger=metrics.__name__):
        _fake_run(tmp_path, monkeypatch, minutes=3, variant="tok")
        assert "tokenized period" not in caplog.text
        _fake_run(tmp_path, monkeypatch, minutes=3, variant="raw")
        assert "tokenized period" in caplog.text


def test_the_demo_preset_serves_up_to_20_minutes_and_tiny_beyond():
    # guards: the documented "demo up to 20 --minutes, tiny beyond" boundary
    assert demo.default_preset(10) == demo.default_preset(20) == "demo"
    assert demo.default_preset(20.5) == demo.default_preset(60) == "tiny"


def test_a_demos_set_wins_over_its_time_budget(tmp_path, monkeypatch):
    # guards: --set train.max_steps / train.max_minutes overwritten by the demo's own budget
    options = {"overrides": ["train.max_steps=50", "train.max_minutes=2"]}
    config = _fake_run(tmp_path, monkeypatch, minutes=3, **options)["train"][0]
    assert (config.train.max_steps, config.train.max_minutes) == (50, 2.0)
