"""Fine-tuning (training/warm_start.py): data encoded with a trained model's vocabulary
(`prepare --vocab`), and a new run that starts from the model's weights and settings with a new
optimiser and schedule (`train --init`, `train.init_from`)."""

import json
import logging
import random
import shutil
from dataclasses import replace

import pytest
import torch

from transduce.cli import main
from transduce.config import ConfigError, TrainConfig, override
from transduce.data.corpus import DataError, LengthFilter
from transduce.data.dataset import PreparedData, prepare
from transduce.models import build_model
from transduce.models.saved import load_model, load_vocab
from transduce.presets import tiny as tiny_config
from transduce.training.checkpoint import load, save
from transduce.training.warm_start import (
    NOT_INHERITED,
    load_initial_weights,
    settings_to_fine_tune,
)

from .conftest import PLUMBING_MODEL, as_set_arguments, reverse_task_files, write_lines

SETTINGS = PLUMBING_MODEL | {"model.dropout": 0.1, "train.valid_every": 2, "train.keep_last": 2}
SETTINGS |= {"train.average_last": 1, "train.valid_bleu": False, "train.warmup_steps": 50}


def run(*argv):
    main([str(a) for a in argv])


def prepare_files(splits: dict, out, *options):
    (train_src, train_tgt), (dev_src, dev_tgt) = splits["train"], splits["dev"]
    run(
        "prepare", "files", "--src", "xx", "--tgt", "yy", "--train-src", train_src,
        "--train-tgt", train_tgt, "--dev-src", dev_src, "--dev-tgt", dev_tgt, "--out", out,
        *options,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A model trained 4 updates on one reversal corpus (its own 16-piece BPE), and a second
    corpus, of other sentences, prepared with that model's vocabulary."""
    folder = tmp_path_factory.mktemp("fine-tune")
    (folder / "a").mkdir(), (folder / "b").mkdir()
    first = reverse_task_files(folder / "a", n_train=200)
    prepare_files(first, folder / "data", "--vocab-size", 16)
    settings = as_set_arguments(SETTINGS)
    run("train", "--data", folder / "data", "--preset", "tiny", "--out", folder / "run",
        "--max-steps", 4, "--set", *settings)  # fmt: skip
    new = reverse_task_files(folder / "b", n_train=150, seed=7)
    prepare_files(new, folder / "new", "--vocab", folder / "run")
    return folder


def test_prepare_with_a_models_vocabulary_encodes_the_new_text_with_it(pretrained):
    model, new = load_model(pretrained / "run"), PreparedData.load(pretrained / "new")
    assert new.vocab.serialized == model.vocab.serialized
    assert new.meta["vocab_size"] == model.vocab.size
    first_line = (pretrained / "b" / "train.src").read_text().splitlines()[0]
    src, _ = new.split("train").pair(0)
    assert src.tolist() == model.vocab.encode([first_line])[0]


def test_a_vocabulary_is_read_from_a_run_a_checkpoint_a_prepared_folder_or_its_file(pretrained):
    expected = load_model(pretrained / "run").vocab.serialized
    sources = [
        pretrained / "run",
        pretrained / "run" / "average.pt",
        pretrained / "data",
        pretrained / "data" / "vocab.model",
    ]
    for source in sources:
        assert load_vocab(source).serialized == expected, source


def test_the_given_vocabulary_is_an_input_of_the_prepared_folder(pretrained, tmp_path, caplog):
    """Prepared again with the same vocabulary it is reused; with a trained BPE it is rebuilt."""
    splits = reverse_task_files(tmp_path, n_train=100)
    vocab, options = load_vocab(pretrained / "run"), dict(length_filter=LengthFilter())
    options |= dict(description={}, vocab_size=16)
    first = prepare(splits, tmp_path / "p", vocab=vocab, **options)
    with caplog.at_level(logging.INFO):  # no BPE is trained: its coverage does not count
        prepare(splits, tmp_path / "p", vocab=vocab, character_coverage=0.5, **options)
    assert "from the same inputs and options; loading it" in caplog.text
    trained = prepare(splits, tmp_path / "p", **options)
    assert trained.meta["fingerprint"] != first.meta["fingerprint"]
    assert "vocab" not in trained.meta and first.meta["vocab"]


def test_characters_the_given_vocabulary_lacks_are_named(pretrained, tmp_path, caplog):
    splits = reverse_task_files(tmp_path, n_train=50)
    write_lines(tmp_path / "train.src", ["a b zz", "a k", "b c"])
    write_lines(tmp_path / "train.tgt", ["zz b a", "k a", "c b"])
    vocab = load_vocab(pretrained / "run")
    with caplog.at_level(logging.WARNING):
        prepare(splits, tmp_path / "p", vocab=vocab, vocab_size=16, length_filter=LengthFilter(),
                description={})  # fmt: skip
    assert "lacks 2 character(s) of the training text, 6 time(s) in all" in caplog.text
    assert "'z', 'k'" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # text the vocabulary covers: nothing to say
        prepare(reverse_task_files(tmp_path, n_train=50), tmp_path / "q", vocab=vocab,
                vocab_size=16, length_filter=LengthFilter(), description={})  # fmt: skip
    assert "lacks" not in caplog.text


def test_characters_are_looked_up_through_the_vocabularys_own_normalisation(tmp_path, caplog):
    """A model trained elsewhere with NFKC reads a full-width 'ｆ' as 'f': not missing."""
    import sentencepiece as spm

    splits = reverse_task_files(tmp_path, n_train=50)
    spm.SentencePieceTrainer.train(input=str(splits["train"][0]), model_prefix=str(tmp_path / "sp"),
                                   vocab_size=16, model_type="bpe", pad_id=0, unk_id=1, bos_id=2,
                                   eos_id=3, minloglevel=2)  # fmt: skip
    write_lines(tmp_path / "train.src", ["a ｂ", "x"])
    write_lines(tmp_path / "train.tgt", ["ｂ a", "x"])
    with caplog.at_level(logging.WARNING):
        prepare(splits, tmp_path / "p", vocab=load_vocab(tmp_path / "sp.model"),
                length_filter=LengthFilter(), description={})  # fmt: skip
    assert "lacks 1 character(s) of the training text, 2 time(s) in all (most often 'x')" in (
        caplog.text
    )


def test_prepare_needs_a_size_or_a_vocabulary(tmp_path):
    with pytest.raises(DataError, match="prepare needs vocab_size, the BPE's size to train, or a"):
        prepare(reverse_task_files(tmp_path, n_train=10), tmp_path / "p",
                length_filter=LengthFilter(), description={})  # fmt: skip


def test_a_sentencepiece_model_of_other_special_ids_is_refused(tmp_path):
    """sentencepiece's defaults (unk 0, bos 1, eos 2, no pad) are not this toolkit's."""
    import sentencepiece as spm

    splits = reverse_task_files(tmp_path, n_train=50)
    spm.SentencePieceTrainer.train(input=str(splits["train"][0]), model_prefix=str(tmp_path / "sp"),
                                   vocab_size=12, model_type="bpe", minloglevel=2)  # fmt: skip
    vocab = load_vocab(tmp_path / "sp.model")
    with pytest.raises(DataError, match="numbers its special pieces pad -1, unk 0, bos 1, eos 2"):
        prepare(splits, tmp_path / "p", vocab=vocab, vocab_size=12, length_filter=LengthFilter(),
                description={})  # fmt: skip
    assert not (tmp_path / "p").exists()


def test_prepare_refuses_a_vocabulary_with_a_size_or_for_a_treebank(pretrained, tmp_path):
    splits = reverse_task_files(tmp_path, n_train=50)
    with pytest.raises(SystemExit, match="give --vocab or --vocab-size, not both"):
        prepare_files(splits, tmp_path / "p", "--vocab", pretrained / "run", "--vocab-size", 16)
    with pytest.raises(SystemExit, match="--vocab is for parallel corpora"):
        run("prepare", "ptb", "--data-dir", tmp_path, "--out", tmp_path / "t", "--vocab",
            pretrained / "run")  # fmt: skip


def fine_tuning(pretrained, **changes):
    config = settings_to_fine_tune(pretrained / "run")
    return override(config, changes)


def started(config, data: PreparedData):
    """The model a run of `config` starts from: built (seeded), then init_from's weights."""
    torch.manual_seed(5)
    model = build_model(config.model, data.vocab)
    load_initial_weights(model, config, data)
    return model


def test_the_run_starts_from_the_saved_weights_and_its_recipe(pretrained):
    saved, new = load_model(pretrained / "run"), PreparedData.load(pretrained / "new")
    config = fine_tuning(pretrained)
    assert config.train.init_from == str((pretrained / "run" / "average.pt").resolve())
    assert config.model == saved.config.model and config.data == saved.config.data
    assert config.train.label_smoothing == saved.config.train.label_smoothing
    assert config.train.warmup_steps == saved.config.train.warmup_steps == 50  # its recipe
    model = started(config, new)
    for name, weight in saved.model.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], weight, rtol=0, atol=0, msg=name)
    fresh = started(override(config, {"train.init_from": ""}), new)  # the seed's weights
    fresh_weights, saved_weights = fresh.state_dict(), saved.model.state_dict()
    assert not any(torch.equal(fresh_weights[name], w) for name, w in saved_weights.items()
                   if "norm" not in name)  # fmt: skip


def test_the_budget_the_update_counts_and_the_machine_are_not_inherited(tmp_path, pretrained):
    """The saved run's limits, late dropout, bidirectional share and precision describe that
    run and its host."""
    saved = load_model(pretrained / "run")
    odd = {"max_steps": 4, "max_minutes": 20.0, "max_epochs": 3, "late_dropout": 800}
    odd |= {"both_ways": 0.3}
    odd |= {"rdrop": 1.0, "rdrop_after": 300, "precision": "bf16", "threads": 1, "compile": "on"}
    state = load(saved.path)
    state["config"] = replace(saved.config, train=replace(saved.config.train, **odd)).to_json()
    save(state, tmp_path / "odd.pt")
    train = settings_to_fine_tune(tmp_path / "odd.pt").train
    fresh = set(odd) - {"rdrop"}  # named here, not read from the module under test
    assert set(NOT_INHERITED) == fresh
    defaults = TrainConfig()
    assert {name: getattr(train, name) for name in fresh} == {
        name: getattr(defaults, name) for name in fresh
    }
    assert train.rdrop == 1.0  # R-Drop is the recipe's


def test_a_relative_model_path_is_recorded_whole(pretrained, monkeypatch):
    """The checkpoint file the run began from, wherever the command was typed."""
    monkeypatch.chdir(pretrained)
    config = settings_to_fine_tune("run")
    assert config.train.init_from == str((pretrained / "run" / "average.pt").resolve())


def test_only_the_dropout_rates_of_the_model_may_change(pretrained):
    new = PreparedData.load(pretrained / "new")
    started(fine_tuning(pretrained, **{"model.dropout": 0.3}), new)
    started(fine_tuning(pretrained, **{"model.attention_dropout": 0.2}), new)
    with pytest.raises(ConfigError, match=r"but for its dropout; this run changes model\.d_ff 32"):
        started(fine_tuning(pretrained, **{"model.d_ff": 48}), new)
    with pytest.raises(ConfigError, match=r"model\.pre_norm True -> False"):  # same shapes
        started(fine_tuning(pretrained, **{"model.pre_norm": False}), new)


def test_data_of_another_vocabulary_is_refused_naming_the_fix(pretrained, tmp_path):
    """As many pieces, other ones: each row of the embeddings would stand for another piece."""
    splits, rng = reverse_task_files(tmp_path, n_train=100), random.Random(0)
    words = ["ab", "cd", "efgh", "ba", "dc"]
    lines = [" ".join(rng.choice(words) for _ in range(4)) for _ in range(300)]
    write_lines(splits["train"][0], lines), write_lines(splits["train"][1], lines[::-1])
    other = prepare(splits, tmp_path / "p", vocab_size=16, length_filter=LengthFilter(),
                    description={})  # fmt: skip
    ours = PreparedData.load(pretrained / "new").vocab
    assert other.vocab.size == ours.size and other.vocab.serialized != ours.serialized
    with pytest.raises(ConfigError, match=r"another vocabulary .*: prepare the data with --vocab"):
        started(fine_tuning(pretrained), other)


def test_train_init_trains_from_the_model_with_a_new_optimiser(pretrained, tmp_path, monkeypatch):
    """Through the command: the run's settings are the model's (its budget given anew), its first
    update sees the saved weights, and Adam and the schedule start at update 1."""
    import transduce.training.loop as loop_module

    seen = []
    real = loop_module.train_step

    def recording(network, optimizer, batches, **kwargs):
        if not seen:
            seen.append(({k: v.clone() for k, v in network.state_dict().items()}, kwargs["rate"],
                         dict(optimizer.state)))  # fmt: skip
        return real(network, optimizer, batches, **kwargs)

    monkeypatch.setattr(loop_module, "train_step", recording)
    run("train", "--data", pretrained / "new", "--init", pretrained / "run", "--out",
        tmp_path / "ft", "--max-steps", 2, "--set", "model.dropout=0.2")  # fmt: skip
    saved = load_model(pretrained / "run")
    weights, rate, adam = seen[0]
    for name, weight in saved.model.state_dict().items():
        torch.testing.assert_close(weights[name], weight, rtol=0, atol=0, msg=name)
    assert adam == {}  # no moments carried over
    train, d_model = saved.config.train, saved.config.model.d_model
    assert rate == pytest.approx(train.lr_scale * d_model**-0.5 * train.warmup_steps**-1.5)
    config = json.loads((tmp_path / "ft" / "config.json").read_text())
    assert config["train"]["init_from"] == str(saved.path.resolve())
    assert config["model"]["dropout"] == 0.2 and config["model"]["d_ff"] == 32
    state = load(tmp_path / "ft" / "checkpoints" / "step_00000002.pt")
    assert state["progress"]["step"] == 2
    assert {int(s["step"]) for s in state["optimizer"]["state"].values()} == {2}


def test_init_with_a_preset_is_refused(pretrained, tmp_path):
    with pytest.raises(SystemExit, match="fine-tuning takes the model's settings"):
        run("train", "--data", pretrained / "new", "--init", pretrained / "run", "--preset",
            "tiny", "--out", tmp_path / "ft")  # fmt: skip


def test_a_fine_tuning_run_resumes_without_the_model_it_began_from(pretrained, tmp_path):
    """Resumed with or without --init, after that model is gone, it ends as an unbroken run;
    --init naming another model is refused."""
    shutil.copytree(pretrained / "run", tmp_path / "model")

    def train(name: str, steps: int, *more) -> dict:
        run("train", "--data", pretrained / "new", "--out", tmp_path / name, "--max-steps",
            steps, *more)  # fmt: skip
        return load(tmp_path / name / "average.pt")["model"]

    unbroken = train("unbroken", 4, "--init", tmp_path / "model")
    train("resumed", 2, "--init", tmp_path / "model")
    shutil.rmtree(tmp_path / "model")
    with pytest.raises(SystemExit, match=r"began from .*model/average\.pt, not .*run"):
        train("resumed", 4, "--resume", "--init", pretrained / "run")
    resumed = train("resumed", 4, "--resume")
    for name, weight in unbroken.items():
        torch.testing.assert_close(resumed[name], weight, rtol=0, atol=0, msg=name)


def test_data_longer_than_a_fine_tuned_models_positions_is_told_to_shorten(pretrained):
    """A fine-tuned model keeps its table of learned positions: the data has to fit it."""
    from transduce.tasks import resolve_config

    new = PreparedData.load(pretrained / "new")
    learned = {"model.positions": "learned", "model.max_positions": 4}
    with pytest.raises(ConfigError, match=r"set model\.max_positions=13 or more"):
        resolve_config(override(tiny_config(), learned), new)
    with pytest.raises(ConfigError, match=r"prepare the data with --max-len 3, and a dev set"):
        resolve_config(fine_tuning(pretrained, **learned), new)
