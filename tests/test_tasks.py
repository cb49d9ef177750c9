"""The task seam: the task comes from the prepared data into the run, and validation, checkpoint
ranking and scoring ask the task, never the dataset."""

from dataclasses import asdict, replace
from pathlib import Path

import pytest
import sacrebleu
import torch

import transduce.training.loop as loop_module
from transduce.config import ConfigError, DecodeConfig, TaskConfig, override
from transduce.data.corpus import LengthFilter
from transduce.data.dataset import PreparedData, prepare
from transduce.presets import tiny
from transduce.tasks import get_task
from transduce.tasks.metrics import Score
from transduce.tasks.translation import scoring
from transduce.training.checkpoint import load
from transduce.training.loop import Trainer, resolve_config
from transduce.training.runlog import read_log

from .conftest import PLUMBING_MODEL, reverse_task_files

TOKENIZED = TaskConfig(tokenize="none", lowercase=True)


@pytest.fixture(scope="module")
def tokenized_data(tmp_path_factory) -> PreparedData:
    folder = tmp_path_factory.mktemp("tasks")
    return prepare(
        reverse_task_files(folder, n_train=200, n_dev=8),
        folder / "data",
        vocab_size=16,
        length_filter=LengthFilter(),
        description={"variant": "whatever"},
        task=TOKENIZED,
    )


def test_prepare_records_the_task_and_old_folders_infer_it(tokenized_data, tmp_path):
    assert tokenized_data.task == TOKENIZED
    assert PreparedData.load(tokenized_data.path).task == TOKENIZED
    meta = dict(tokenized_data.meta)
    del meta["task"]
    assert PreparedData(Path("x"), meta, tokenized_data.vocab).task == TaskConfig()
    meta["description"] = {"variant": "tok"}  # how version 0.1 knew tokenized text
    assert PreparedData(Path("x"), meta, tokenized_data.vocab).task == TOKENIZED


def test_the_run_takes_its_task_vocabulary_and_decoding_from_the_data(tokenized_data):
    config = resolve_config(replace(tiny(), decode=DecodeConfig()), tokenized_data)
    assert config.task == TOKENIZED and config.model.vocab_size == tokenized_data.vocab.size
    assert config.decode == get_task(TOKENIZED).decode_defaults()
    chosen = override(tiny(), {"decode.beam_size": "8"})  # tiny's own alpha 1.0 stays too
    assert resolve_config(chosen, tokenized_data).decode == DecodeConfig(beam_size=8, alpha=1.0)


def test_a_decoding_setting_changed_keeps_the_tasks_other_defaults(tokenized_data):
    """Parsing searches with beam 21 and +300 tokens (s6.3): changing the length penalty alone
    must not bring translation's beam 4 and +50 with it."""
    meta = dict(tokenized_data.meta) | {"task": asdict(TaskConfig(name="parse"))}
    parsing = PreparedData(Path("x"), meta, tokenized_data.vocab)
    defaults = get_task(parsing.task).decode_defaults()
    untouched = replace(tiny(), decode=DecodeConfig())
    assert resolve_config(untouched, parsing).decode == defaults
    chosen = override(untouched, {"decode.alpha": "0.5", "decode.batch_size": "8"})
    assert resolve_config(chosen, parsing).decode == replace(defaults, alpha=0.5, batch_size=8)
    with pytest.raises(ConfigError, match="no_repeat_ngram is for translation"):  # trees repeat
        resolve_config(override(untouched, {"decode.no_repeat_ngram": "3"}), parsing)


def test_translation_is_scored_as_its_task_says():
    hypotheses, references = ["The Dog , runs ."], ["the dog , runs ."]
    cased = get_task(TaskConfig()).score(hypotheses, references)
    lowercased = get_task(TOKENIZED).score(hypotheses, references)
    assert lowercased.score == pytest.approx(100.0) and cased.score < 100.0
    assert "tok:none" in lowercased.signature and "case:lc" in lowercased.signature
    assert "tok:13a" in cased.signature
    assert [s.name for s in get_task(TaskConfig()).report(hypotheses, references)] == [
        "BLEU",
        "chrF",
    ]


def test_raw_text_of_a_language_without_spaces_is_scored_on_its_characters(
    tmp_path, capsys, caplog
):
    """13a leaves a raw Japanese sentence one word, so one word wrong scores 0: Japanese (and
    Thai, ...) raw text is scored on characters, Chinese by sacreBLEU's zh tokenizer, as
    `prepare` chooses by the target language; `evaluate --tokenize` asks for one."""
    from transduce.cli import main
    from transduce.tasks.translation import raw_tokenizer

    hypotheses, references = ["私は猫が好きです。"], ["私は犬が好きです。"]
    assert get_task(TaskConfig()).score(hypotheses, references).score == 0.0
    japanese = get_task(scoring(False, "ja")).score(hypotheses, references)
    assert 0 < japanese.score < 100 and "tok:char" in japanese.signature
    assert "tok:zh" in get_task(scoring(False, "zh")).score(hypotheses, references).signature
    assert [raw_tokenizer(t) for t in ("ja_JP", "zh-Hant", "TH", "yue", "jpn", "de", None)] == [
        "char", "zh", "char", "zh", "char", "13a", "13a"]  # fmt: skip
    with caplog.at_level("WARNING"):
        get_task(TaskConfig()).score(hypotheses, references)  # said, with what to do
    assert "evaluate --tokenize char" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        get_task(TaskConfig()).score(["ein Hund"], ["ein Hund 犬"])
    assert "--tokenize char" not in caplog.text
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text(hypotheses[0] + "\n", encoding="utf-8")
    ref.write_text(references[0] + "\n", encoding="utf-8")
    main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--tokenize", "char"])
    assert f"BLEU = {japanese.score:.2f}" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--tokenize is for raw text"):
        main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--tokenize", "char",
              "--lowercase-tokenized"])  # fmt: skip
    with pytest.raises(SystemExit, match="--tokenize is for translations' BLEU"):
        main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--tokenize", "char",
              "--task", "parse"])  # fmt: skip


def test_tokenized_text_is_scored_lowercased_on_its_tokens_and_references_are_the_splits_own(
    tokenized_data,
):
    """`scoring` picks the task of each kind of corpus; the references are the split asked for."""
    assert scoring(True) == TaskConfig(tokenize="none", lowercase=True)
    assert scoring(False) == TaskConfig(tokenize="13a", lowercase=False)  # sacreBLEU's defaults
    references = get_task(scoring(True)).references(tokenized_data, "test")
    assert references == tokenized_data.text("test").tgt != tokenized_data.text("dev").tgt


class ErrorCount:
    """A task whose metric is better lower, with scores scripted per validation."""

    metric, higher_is_better = "errors", False

    def __init__(self, scores):
        self.scores, self.scored = list(scores), []

    def decode_defaults(self):
        return DecodeConfig()

    def postprocess(self, outputs, sources):
        return outputs

    def references(self, data, split):
        return data.text(split).tgt

    def score(self, hypotheses, references):
        self.scored.append(len(hypotheses))
        value = self.scores.pop(0)
        return Score("errors", value, "scripted", str(value))

    def report(self, hypotheses, references):
        return [self.score(hypotheses, references)]


def test_validation_logs_and_ranks_checkpoints_by_the_tasks_metric(
    tokenized_data, tmp_path, monkeypatch
):
    task = ErrorCount([5.0, 1.0, 3.0])
    monkeypatch.setattr(loop_module, "get_task", lambda config: task)
    settings = PLUMBING_MODEL | {"train.max_steps": 6, "train.valid_every": 2}
    config = override(tiny(), settings | {"train.keep_last": 3, "train.average_last": 1})
    Trainer(config, tokenized_data, tmp_path / "run", False, torch.device("cpu")).run()
    assert task.scored == [8, 8, 8]  # every dev sentence, at each validation
    records = read_log(tmp_path / "run" / "log.jsonl")
    assert [r["errors"] for r in records if r["kind"] == "valid"] == [5.0, 1.0, 3.0]
    assert load(tmp_path / "run" / "checkpoints" / "best.pt")["step"] == 4  # the fewest errors


def test_the_reports_chrf_scores_the_hypotheses_against_the_references():
    # guards: `evaluate`'s chrF with hypotheses and references swapped (chrF weighs recall)
    hypotheses, references = ["a dog"], ["a dog runs on the grass"]
    chrf = get_task(TaskConfig()).report(hypotheses, references)[1]
    expected = sacrebleu.CHRF().corpus_score(hypotheses, [references]).score
    swapped = sacrebleu.CHRF().corpus_score(references, [hypotheses]).score
    assert chrf.score == pytest.approx(expected) and expected != pytest.approx(swapped)
