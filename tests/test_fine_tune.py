"""Fine-tuning (training/warm_start.py): data encoded with a trained model's vocabulary
(`prepare --vocab`), and a new run that starts from the model's weights and settings with a new
optimiser and schedule (`train --init`, `train.init_from`)."""

import json
import logging
import random

import pytest
import torch

from transduce.cli import main
from transduce.config import ConfigError, override
from transduce.data.corpus import DataError, LengthFilter
from transduce.data.dataset import PreparedData, prepare
from transduce.models.saved import load_model, load_vocab
from transduce.training.checkpoint import load
from transduce.training.loop import Trainer
from transduce.training.warm_start import initial_model, settings_to_fine_tune

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
    with caplog.at_level(logging.INFO):
        prepare(splits, tmp_path / "p", vocab=vocab, **options)
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


def test_the_run_starts_from_the_saved_weights_and_its_settings(pretrained):
    saved, new = load_model(pretrained / "run"), PreparedData.load(pretrained / "new")
    config = fine_tuning(pretrained)
    assert config.train.init_from == str((pretrained / "run").resolve())
    assert config.model == saved.config.model and config.data == saved.config.data
    torch.manual_seed(5)
    model = initial_model(config, new)
    for name, weight in saved.model.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], weight, rtol=0, atol=0, msg=name)
    torch.manual_seed(5)  # without init_from: the seed's fresh weights
    fresh = initial_model(override(config, {"train.init_from": ""}), new)
    fresh_weights, saved_weights = fresh.state_dict(), saved.model.state_dict()
    assert not any(torch.equal(fresh_weights[name], w) for name, w in saved_weights.items()
                   if "norm" not in name)  # fmt: skip


def test_a_relative_model_path_is_recorded_whole(pretrained, monkeypatch):
    """So that `--resume` typed in another folder names the same model, and the same run."""
    monkeypatch.chdir(pretrained)
    config = settings_to_fine_tune("run")
    assert config.train.init_from == str((pretrained / "run").resolve())


def test_only_the_dropout_rates_of_the_model_may_change(pretrained):
    new = PreparedData.load(pretrained / "new")
    initial_model(fine_tuning(pretrained, **{"model.dropout": 0.3}), new)
    initial_model(fine_tuning(pretrained, **{"model.attention_dropout": 0.2}), new)
    with pytest.raises(ConfigError, match=r"but for its dropout; this run changes model\.d_ff 32"):
        initial_model(fine_tuning(pretrained, **{"model.d_ff": 48}), new)
    with pytest.raises(ConfigError, match=r"model\.pre_norm True -> False"):  # same shapes
        initial_model(fine_tuning(pretrained, **{"model.pre_norm": False}), new)


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
        initial_model(fine_tuning(pretrained), other)


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
    assert config["train"]["init_from"] == str((pretrained / "run").resolve())
    assert config["model"]["dropout"] == 0.2 and config["model"]["d_ff"] == 32
    state = load(tmp_path / "ft" / "checkpoints" / "step_00000002.pt")
    assert state["progress"]["step"] == 2
    assert {int(s["step"]) for s in state["optimizer"]["state"].values()} == {2}


def test_init_with_a_preset_is_refused(pretrained, tmp_path):
    with pytest.raises(SystemExit, match="--init brings the model's settings"):
        run("train", "--data", pretrained / "new", "--init", pretrained / "run", "--preset",
            "tiny", "--out", tmp_path / "ft")  # fmt: skip


def test_a_resumed_fine_tuning_run_ends_where_an_unbroken_one_does(pretrained, tmp_path):
    new = PreparedData.load(pretrained / "new")

    def train(name: str, steps: int, resume: bool) -> dict:
        config = fine_tuning(pretrained, **{"train.max_steps": steps})
        trainer = Trainer(config, new, tmp_path / name, resume, torch.device("cpu"))
        return load(trainer.run())["model"]

    unbroken = train("unbroken", 4, resume=False)
    train("resumed", 2, resume=False)
    resumed = train("resumed", 4, resume=True)
    for name, weight in unbroken.items():
        torch.testing.assert_close(resumed[name], weight, rtol=0, atol=0, msg=name)


def test_resuming_without_init_names_the_model_the_run_began_with(pretrained, tmp_path):
    run("train", "--data", pretrained / "new", "--init", pretrained / "run", "--out",
        tmp_path / "ft", "--max-steps", 2)  # fmt: skip
    began = str((pretrained / "run").resolve())
    with pytest.raises(SystemExit, match=f"it began with --init {began}: give that again"):
        run("train", "--data", pretrained / "new", "--out", tmp_path / "ft", "--resume",
            "--max-steps", 4)  # fmt: skip
