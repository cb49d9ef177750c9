"""Saved models: a run folder written by transduce 0.1 still loads and translates identically,
and one checkpoint file is a whole model (its vocabulary and config travel inside)."""

import json
import shutil
from pathlib import Path

import pytest

from transduce.cli import main
from transduce.config import Config, DecodeConfig, override
from transduce.decoding.translate import Translator
from transduce.models.saved import load_model
from transduce.presets import tiny
from transduce.training.checkpoint import CheckpointError, load, save
from transduce.training.loop import train

from .conftest import PLUMBING_MODEL, prepared_reverse_task, save_toy_model, write_lines

FIXTURES = Path(__file__).parent / "fixtures"
LEGACY_RUN = FIXTURES / "legacy_run"
EXPECTED = json.loads((FIXTURES / "legacy_run_expected.json").read_text())


def _same(results, expected):
    assert [[text for text, _ in hyps] for hyps in results] == [
        [text for text, _ in hyps] for hyps in expected
    ]
    for hyps, wanted in zip(results, expected, strict=True):
        assert [s for _, s in hyps] == pytest.approx([s for _, s in wanted], abs=1e-6)


def test_a_run_folder_of_version_0_1_translates_as_it_did():
    translator = Translator.load(LEGACY_RUN)
    _same(translator.translate(EXPECTED["lines"]), EXPECTED["beam4"])
    n_best = translator.translate(EXPECTED["lines"], DecodeConfig(beam_size=3, n_best=2))
    _same(n_best, EXPECTED["beam3_nbest2"])
    assert any(hyps[0][0] for hyps in EXPECTED["beam4"])  # the fixture translates something


def test_a_checkpoint_of_version_0_1_finds_its_vocabulary_in_its_run_folder(tmp_path):
    step_file = LEGACY_RUN / "checkpoints" / "step_00000240.pt"
    saved = load_model(step_file)
    assert saved.step == 240 and saved.config.model.family == "transformer"
    lonely = tmp_path / "step.pt"
    shutil.copyfile(step_file, lonely)
    with pytest.raises(CheckpointError, match="carries no vocabulary"):
        load_model(lonely)


def test_the_cli_translates_with_a_version_0_1_run(tmp_path, capsys):
    source = write_lines(tmp_path / "in.txt", EXPECTED["lines"])
    main(["-q", "translate", "--model", str(LEGACY_RUN), "--input", str(source)])
    assert capsys.readouterr().out.splitlines() == [hyps[0][0] for hyps in EXPECTED["beam4"]]


def test_a_version_0_1_run_resumes(tmp_path):
    """Its config.json has no model family and no task; the data is prepared afresh as then."""
    description = {"corpus": "files", "variant": "raw", "src": "xx", "tgt": "yy"}
    data = prepared_reverse_task(tmp_path, 600, 20, vocab_size=24, description=description)
    run = tmp_path / "run"
    shutil.copytree(LEGACY_RUN, run)
    config = override(Config.load(run / "config.json"), {"train.max_steps": 250})
    train(config, data, run, resume=True, device="cpu")
    assert load(run / "average.pt")["step"] == 250
    assert Config.load(run / "config.json").task.name == "translation"


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("one-file")
    data = prepared_reverse_task(folder, 300, 10, description={})
    settings = PLUMBING_MODEL | {"train.max_steps": 6, "train.valid_every": 3, "train.keep_last": 2}
    train(override(tiny(), settings | {"train.average_last": 2}), data, folder / "run")
    return folder / "run"


def test_one_checkpoint_file_is_a_whole_model(trained_run, tmp_path):
    alone = tmp_path / "elsewhere" / "model.pt"
    alone.parent.mkdir()
    shutil.copyfile(trained_run / "average.pt", alone)
    lines = ["a b c", "d e", ""]
    from_folder = Translator.load(trained_run).translate(lines)
    assert Translator.load(alone).translate(lines) == from_folder
    state = load(alone)
    assert state["vocab"] == (trained_run / "vocab.model").read_bytes()
    assert Config.from_dict(json.loads(state["config"])).model.vocab_size == 16


def test_the_cli_translates_with_one_checkpoint_file(trained_run, tmp_path, capsys):
    alone = tmp_path / "model.pt"
    shutil.copyfile(trained_run / "checkpoints" / "step_00000006.pt", alone)
    source = write_lines(tmp_path / "in.txt", ["a b c", "h"])
    main(["-q", "translate", "--model", str(alone), "--input", str(source)])
    from_file = capsys.readouterr().out
    main(["-q", "translate", "--model", str(trained_run), "--input", str(source),
          "--checkpoint", str(trained_run / "checkpoints" / "step_00000006.pt")])  # fmt: skip
    assert capsys.readouterr().out == from_file


def test_a_file_that_is_no_model_is_named_in_the_error(tmp_path):
    save({"step": 3}, tmp_path / "state.pt")
    with pytest.raises(CheckpointError, match=r"state\.pt: holds no model"):
        load_model(tmp_path / "state.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"junk\.pt"):
        Translator.load(tmp_path / "junk.pt")


def test_a_run_folder_gives_its_average_or_the_checkpoint_asked_for_in_evaluation_mode(trained_run):
    """The translator logs `path` and `step` as what it loaded; the library's callers get a
    model ready to decode (dropout off) without calling eval() themselves."""
    average = load_model(trained_run)
    assert average.path == trained_run / "average.pt" and average.step == 6
    chosen = trained_run / "checkpoints" / "step_00000003.pt"
    earlier = load_model(trained_run, chosen)
    assert earlier.path == chosen and earlier.step == 3
    assert not average.model.training and not earlier.model.training


@pytest.mark.parametrize("missing", ["config", "model"])
def test_a_checkpoint_without_its_config_or_its_weights_holds_no_model(tmp_path, missing):
    state = load(save_toy_model(tmp_path))
    del state[missing]
    save(state, tmp_path / "part.pt")
    with pytest.raises(CheckpointError, match=r"part\.pt: holds no model"):
        load_model(tmp_path / "part.pt")


def test_weights_that_do_not_fit_the_config_are_refused_not_left_at_random(tmp_path):
    state = load(save_toy_model(tmp_path))
    dropped = next(name for name in state["model"] if name.endswith("weight"))
    del state["model"][dropped]
    save(state, tmp_path / "short.pt")
    with pytest.raises(RuntimeError, match=dropped.replace(".", r"\.")):
        load_model(tmp_path / "short.pt")


def test_a_version_0_1_checkpoint_finds_the_vocabulary_of_the_folder_it_is_named_with(tmp_path):
    """Its averaged model named alone (vocab.model beside it), and a checkpoint copied out of the
    run folder but loaded with that folder."""
    vocabulary = (LEGACY_RUN / "vocab.model").read_bytes()
    assert load_model(LEGACY_RUN / "average.pt").vocab.serialized == vocabulary
    lonely = tmp_path / "step.pt"
    shutil.copyfile(LEGACY_RUN / "checkpoints" / "step_00000240.pt", lonely)
    saved = load_model(LEGACY_RUN, lonely)
    assert saved.path == lonely and saved.step == 240 and saved.vocab.serialized == vocabulary
    with pytest.raises(CheckpointError, match=r"step\.pt: carries no vocabulary"):
        load_model(tmp_path, lonely)  # a folder without one: the error names the file
