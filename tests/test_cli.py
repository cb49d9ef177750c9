"""The `transduce` command: the whole flow on a toy corpus, and a clear message for bad input."""

import io
import re
import sys
from pathlib import Path

import pytest
import torch

from transduce.cli import main
from transduce.cli.common import config_from
from transduce.cli.main import _parser
from transduce.config import override
from transduce.models import count_parameters
from transduce.models.transformer import Transformer
from transduce.presets import preset

from .conftest import PLUMBING_MODEL, as_set_arguments, reverse_task_files, write_lines

TOY_SETTINGS = as_set_arguments(
    PLUMBING_MODEL
    | {"train.valid_every": 5, "train.log_every": 5, "train.keep_last": 2, "train.average_last": 2}
)


def run(*argv, stdin: bytes | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    main([str(a) for a in argv])


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """A prepared toy corpus and a run trained on it for 10 steps through the CLI."""
    folder = tmp_path_factory.mktemp("cli")
    splits = reverse_task_files(folder, n_train=200)
    (train_src, train_tgt), (dev_src, dev_tgt) = splits["train"], splits["dev"]
    run(
        "prepare",
        "files",
        "--src",
        "xx",
        "--tgt",
        "yy",
        "--train-src",
        train_src,
        "--train-tgt",
        train_tgt,
        "--dev-src",
        dev_src,
        "--dev-tgt",
        dev_tgt,
        "--vocab-size",
        16,
        "--out",
        folder / "data",
    )
    run(
        "train",
        "--data",
        folder / "data",
        "--preset",
        "tiny",
        "--out",
        folder / "run",
        "--max-steps",
        10,
        "--set",
        *TOY_SETTINGS,
    )
    return folder


def test_translate_then_evaluate(toy_run, capsys):
    lines = ["a b c", "", "h g"]
    source = write_lines(toy_run / "in.txt", lines)
    run(
        "translate",
        "--model",
        toy_run / "run",
        "--input",
        source,
        "--output",
        toy_run / "out.txt",
        "--beam",
        2,
    )
    outputs = (toy_run / "out.txt").read_text().splitlines()
    assert len(outputs) == 3 and outputs[1] == ""  # one line out per line in; empty stays empty
    refs = write_lines(toy_run / "refs.txt", ["a dog runs on the grass .", "two men talk ."])
    run("evaluate", "--hyp", refs, "--ref", refs)
    printed = capsys.readouterr().out
    assert "BLEU = 100.00" in printed and "signature: nrefs:1|case:mixed" in printed


def test_evaluate_scores_the_hypotheses_against_the_references_as_asked(tmp_path, capsys):
    """--hyp is scored against --ref (BLEU is not symmetric: a short hypothesis pays the brevity
    penalty), cased unless --lowercase-tokenized."""
    import sacrebleu

    hyps, refs = ["A dog runs ."], ["a dog runs on the grass ."]
    hyp, ref = write_lines(tmp_path / "hyp.txt", hyps), write_lines(tmp_path / "ref.txt", refs)
    run("evaluate", "--hyp", hyp, "--ref", ref)
    expected = sacrebleu.corpus_bleu(hyps, [refs]).score
    assert f"BLEU = {expected:.2f}" in capsys.readouterr().out
    run("evaluate", "--hyp", hyp, "--ref", ref, "--lowercase-tokenized")
    lowercased = sacrebleu.corpus_bleu(hyps, [refs], lowercase=True, tokenize="none").score
    assert lowercased > expected and f"BLEU = {lowercased:.2f}" in capsys.readouterr().out


def test_n_best_lists_each_line_in_order(toy_run, capsys, monkeypatch):
    run(
        "translate",
        "--model",
        toy_run / "run",
        "--beam",
        3,
        "--n-best",
        3,
        stdin=b"a b\nc d\n",
        monkeypatch=monkeypatch,
    )
    rows = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    assert [int(r[0]) for r in rows] == [0, 0, 0, 1, 1, 1]
    scores = [float(r[2]) for r in rows[:3]]
    assert scores == sorted(scores, reverse=True)


def test_translate_hands_each_flag_to_the_model_and_its_search(toy_run, monkeypatch):
    """--int8 reaches the loaded model, --beam, --alpha, --n-best, --max-len-b, --batch-size,
    --precision and --workers the search; a flag left out keeps the run's own setting. With
    --sampling, --n-best and the sampling flags reach the sampler, the length settings the
    search's limits."""
    from transduce.decoding.sampling import Sampling
    from transduce.decoding.translate import Translator

    seen, real_load, real_translate = {}, Translator.load, Translator.translate

    def load(*args, **kwargs):
        seen["int8"] = kwargs.get("int8")
        seen["translator"] = real_load(*args, **kwargs)
        return seen["translator"]

    def translate(self, lines, decode=None, sampling=None, prefixes=None):
        seen["decode"], seen["sampling"], seen["prefixes"] = decode, sampling, prefixes
        return real_translate(self, lines, decode, sampling, prefixes)

    monkeypatch.setattr(Translator, "load", staticmethod(load))
    monkeypatch.setattr(Translator, "translate", translate)
    flags = ["--beam", 3, "--alpha", 0.25, "--n-best", 2, "--max-len-b", 4, "--batch-size", 7]
    run(
        "translate",
        "--model",
        toy_run / "run",
        *flags,
        "--int8",
        "--precision",
        "fp32",
        "--workers",
        "3",
        stdin=b"a b\n",
        monkeypatch=monkeypatch,
    )
    chosen = seen["decode"]
    assert seen["int8"] is True
    assert (chosen.beam_size, chosen.alpha, chosen.n_best) == (3, 0.25, 2)
    assert (chosen.max_len_b, chosen.batch_size, chosen.precision) == (4, 7, "fp32")
    assert chosen.workers == 3
    assert seen["sampling"] is None and seen["prefixes"] is None
    run("translate", "--model", toy_run / "run", stdin=b"a b\n", monkeypatch=monkeypatch)
    assert seen["int8"] is False and seen["decode"] == seen["translator"].decode
    prefix = write_lines(toy_run / "prefix.txt", ["b a"])
    run("translate", "--model", toy_run / "run", "--prefix", prefix, stdin=b"a b\n",
        monkeypatch=monkeypatch)  # fmt: skip
    assert seen["prefixes"] == ["b a"]
    sampling = ["--sampling", "--n-best", 3, "--top-k", 5, "--top-p", 0.9, "--temperature", 0.7,
                "--seed", 4, "--alpha", 0.3, "--max-len-b", 6]  # fmt: skip
    run("translate", "--model", toy_run / "run", *sampling, stdin=b"a b\n", monkeypatch=monkeypatch)
    assert seen["sampling"] == Sampling(samples=3, top_k=5, top_p=0.9, temperature=0.7, seed=4)
    assert (seen["decode"].alpha, seen["decode"].max_len_b) == (0.3, 6)


def test_invalid_utf8_input_names_the_line(toy_run, monkeypatch):
    with pytest.raises(SystemExit, match=r"line 2: invalid UTF-8"):
        run(
            "translate",
            "--model",
            toy_run / "run",
            stdin=b"a b\n\xff\xfe c\n",
            monkeypatch=monkeypatch,
        )


def test_an_output_that_cannot_be_written_is_refused_before_decoding(
    toy_run, tmp_path, monkeypatch
):
    """A folder named as --output (or --alignments-out) fails before the model loads, not after
    it has translated the whole input."""
    from transduce.decoding.translate import Translator

    loads = []
    monkeypatch.setattr(Translator, "load", lambda *given, **named: loads.append(given))
    source = tmp_path / "in.txt"
    source.write_text("a b\n")
    for flag in ("--output", "--alignments-out"):
        with pytest.raises(
            SystemExit, match=re.escape(f"{tmp_path} is a folder; name the file to write")
        ):
            run("translate", "--model", toy_run / "run", "--input", source, flag, tmp_path)
    with pytest.raises(SystemExit, match=r"its folder .*nowhere does not exist"):
        run("parse", "--model", toy_run / "run", "--output", tmp_path / "nowhere" / "out.txt")
    assert loads == []


def test_a_corrupt_checkpoint_names_the_file(toy_run, tmp_path):
    broken = tmp_path / "broken.pt"
    broken.write_bytes((toy_run / "run" / "average.pt").read_bytes()[:-100])
    with pytest.raises(SystemExit, match=r"broken\.pt"):
        run("translate", "--model", toy_run / "run", "--checkpoint", broken)


def test_average_writes_a_loadable_model(toy_run, tmp_path, capsys, monkeypatch):
    from transduce.training.checkpoint import CheckpointStore, load

    run("average", "--model", toy_run / "run", "--last", 2, "--out", tmp_path / "avg.pt")
    newest = [load(path)["model"] for path in CheckpointStore(toy_run / "run", 2).last_paths(2)]
    averaged = load(tmp_path / "avg.pt")["model"]
    for name, tensor in averaged.items():  # the mean of the two newest, not the newest alone
        torch.testing.assert_close(tensor, (newest[0][name] + newest[1][name]) / 2)
    assert any(not torch.equal(newest[0][n], newest[1][n]) for n in averaged)
    with pytest.raises(SystemExit, match="no checkpoints to average"):
        run("average", "--model", tmp_path, "--out", tmp_path / "none.pt")
    run("average", "--model", toy_run / "run", "--last", 1, "--out", tmp_path / "one.pt")
    assert all(torch.equal(t, newest[1][n]) for n, t in load(tmp_path / "one.pt")["model"].items())
    run(
        "translate",
        "--model",
        toy_run / "run",
        "--checkpoint",
        tmp_path / "avg.pt",
        stdin=b"a b c\n",
        monkeypatch=monkeypatch,
    )
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_translate_says_when_its_products_take_bfloat16_and_refuses_an_impossible_precision(
    toy_run, monkeypatch, caplog
):
    """On a CPU with AVX-512 BF16 (pretended: the toy's products are all below the route's bars,
    so any CPU decodes them) the log says so and how to keep float32; `--precision bf16` on a
    CPU that would emulate bfloat16 is refused before any input is read."""
    from transduce.models import bf16_decoding

    monkeypatch.setattr(bf16_decoding, "available", True)
    monkeypatch.setattr(bf16_decoding, "_avx512_bf16", True)
    monkeypatch.setattr(bf16_decoding, "_amx", False)
    with caplog.at_level("INFO", logger="transduce"):
        run("translate", "--model", toy_run / "run", stdin=b"a b\n", monkeypatch=monkeypatch)
        assert "large products in bfloat16 (decode.precision=auto; --precision fp32" in caplog.text
        caplog.clear()
        run("translate", "--model", toy_run / "run", "--precision", "fp32", stdin=b"a b\n",
            monkeypatch=monkeypatch)  # fmt: skip
        assert "bfloat16" not in caplog.text
    monkeypatch.setattr(bf16_decoding, "_avx512_bf16", False)
    unread = io.TextIOWrapper(io.BytesIO(b"a b\n"))
    monkeypatch.setattr(sys, "stdin", unread)
    with pytest.raises(SystemExit, match="needs bfloat16 products in hardware"):
        main(["translate", "--model", str(toy_run / "run"), "--precision", "bf16"])
    assert unread.read() == "a b\n"  # refused before the input was read


def test_average_never_writes_over_a_runs_checkpoints(toy_run, tmp_path, caplog):
    """`--out` inside checkpoints/ would replace a step that index.json still lists."""
    from transduce.training.checkpoint import CheckpointStore

    step = CheckpointStore(toy_run / "run", 1).last_paths(1)[0]
    before = step.read_bytes()
    with pytest.raises(SystemExit, match="outside the run's checkpoints/ folder"):
        run("average", "--model", toy_run / "run", "--last", 2, "--out", step)
    assert step.read_bytes() == before
    with pytest.raises(SystemExit, match="is a folder"):
        run("average", "--model", toy_run / "run", "--out", tmp_path)
    with pytest.raises(SystemExit, match="--last must be at least 1, got 0"):
        run("average", "--model", toy_run / "run", "--last", 0, "--out", tmp_path / "a.pt")
    held = len(CheckpointStore(toy_run / "run", 1).steps())
    run("average", "--model", toy_run / "run", "--last", 99, "--out", tmp_path / "all.pt")
    assert f"holds {held} checkpoints: averaging those, not 99" in caplog.text


def test_mismatched_parallel_files_name_both(tmp_path):
    src = write_lines(tmp_path / "a.src", ["x", "y", "z"])
    tgt = write_lines(tmp_path / "a.tgt", ["x", "y"])
    with pytest.raises(SystemExit, match=r"a\.src.*a\.tgt|a\.tgt.*a\.src"):
        run(
            "prepare",
            "files",
            "--src",
            "xx",
            "--tgt",
            "yy",
            "--train-src",
            src,
            "--train-tgt",
            tgt,
            "--dev-src",
            src,
            "--dev-tgt",
            tgt,
            "--out",
            tmp_path / "data",
        )
    with pytest.raises(SystemExit, match=r"3 .* 2|2 .* 3"):
        run("evaluate", "--hyp", src, "--ref", tgt)


def test_bad_settings_are_named(toy_run):
    with pytest.raises(SystemExit, match=r"train\.nonsense"):
        run(
            "train", "--data", toy_run / "data", "--out", toy_run / "x", "--set", "train.nonsense=1"
        )
    with pytest.raises(SystemExit, match="unknown preset"):
        run("train", "--data", toy_run / "data", "--out", toy_run / "x", "--preset", "huge")
    for size in (0, -5):  # 0 once meant the default, -5 reached sentencepiece's own assertion
        with pytest.raises(SystemExit, match=f"--vocab-size must be positive, got {size}"):
            run("prepare", "multi30k", "--src", "en", "--tgt", "de", "--out", toy_run / "x",
                "--vocab-size", size)  # fmt: skip


def test_every_set_counts_when_set_is_given_more_than_once():
    """`--set a=1 --set b=2` applies both (argparse's plain nargs kept only the last one)."""
    parser = _parser()
    train = ["train", "--data", "d", "--out", "o", "--preset", "tiny"]
    args = parser.parse_args(
        [*train, "--set", "data.max_tokens=2048", "--set", "train.valid_every=250", "train.seed=7"]
    )
    config = config_from(args)
    assert (config.data.max_tokens, config.train.valid_every, config.train.seed) == (2048, 250, 7)
    for verb in (["demo"], ["sweep"]):
        args = parser.parse_args([*verb, "--set", "train.seed=7", "--set", "train.cooldown=0"])
        assert args.set == ["train.seed=7", "train.cooldown=0"], verb


def test_train_hands_its_flags_to_the_run_after_the_preset_and_set(tmp_path, monkeypatch):
    """`transduce train`'s flags win over --set, which wins over the preset (`base` unless
    named); --resume and --device reach the run."""
    import transduce.training.loop as loop

    seen = {}
    monkeypatch.setattr(loop, "train", lambda config, *args, **kwargs: seen.update(
        config=config, args=args, kwargs=kwargs) or tmp_path)  # fmt: skip
    yaml = tmp_path / "run.yaml"
    yaml.write_text("train: {warmup_steps: 123, seed: 5, max_steps: 8}\n")
    run("train", "--data", tmp_path / "data", "--out", tmp_path / "run", "--config", yaml,
        "--set", "train.seed=9", "model.dropout=0.2", "--max-minutes", 1.5,
        "--seed", 3, "--resume", "--device", "cpu")  # fmt: skip
    config = seen["config"]
    assert (config.train.max_steps, config.train.max_minutes, config.train.seed) == (8, 1.5, 3)
    assert config.train.warmup_steps == 123
    assert config.model == override(preset("base"), {"model.dropout": 0.2}).model
    assert seen["args"] == (tmp_path / "data", tmp_path / "run")
    assert seen["kwargs"] == {"resume": True, "device": "cpu"}
    run("train", "--data", tmp_path / "data", "--out", tmp_path / "run", "--max-steps", 7)
    assert seen["config"].train.max_steps == 7
    run("train", "--data", tmp_path / "data", "--out", tmp_path / "run")
    assert seen["config"] == preset("base") and seen["kwargs"]["resume"] is False
    with pytest.raises(SystemExit):  # `params` has no default preset: it must be named
        _parser().parse_args(["params", "--vocab-size", "100"])
    average = _parser().parse_args(["average", "--model", "run", "--out", "avg.pt"])
    assert average.last == 5  # the paper's, for `base`


def test_an_empty_environment_variable_counts_as_unset(monkeypatch):
    from transduce.cli.common import env_path

    monkeypatch.setenv("TRANSDUCE_TEST_FOLDER", "")
    assert env_path("TRANSDUCE_TEST_FOLDER") is None
    monkeypatch.setenv("TRANSDUCE_TEST_FOLDER", "corpora")
    assert env_path("TRANSDUCE_TEST_FOLDER") == Path("corpora")


def test_prepare_hands_its_flags_to_the_preparation(tmp_path, monkeypatch):
    """`transduce prepare`: the files or the named corpus, the BPE's size and character coverage
    (0.9995 for a wide script), the length filter, the scoring of tokenized text, --force; for
    the treebank its tags, fraction and 16,000 pieces; and a message for what is missing."""
    from types import SimpleNamespace

    import transduce.data.corpus as corpus
    import transduce.data.dataset as dataset
    import transduce.data.ptb as ptb
    from transduce.config import TaskConfig
    from transduce.data.corpus import LengthFilter
    from transduce.tasks.translation import scoring

    seen, made = (
        {},
        SimpleNamespace(splits={}, vocab=SimpleNamespace(size=1), meta={"filter_report": ""}),
    )
    monkeypatch.setattr(dataset, "prepare", lambda splits, out, **kw: seen.update(
        splits=splits, out=out, **kw) or made)  # fmt: skip
    monkeypatch.setattr(ptb, "prepare_treebank", lambda folder, out, **kw: seen.update(
        treebank=(folder, out, kw)) or made)  # fmt: skip
    monkeypatch.setattr(corpus, "corpus_files", lambda *a, **kw: {"train": a, "dev": kw})
    files = [f"--{n}-{side}" for n in ("train", "dev") for side in ("src", "tgt")]
    paths = [tmp_path / name for name in ("a", "b", "c", "d")]
    given = [x for pair in zip(files, paths, strict=True) for x in pair]
    run("prepare", "files", "--src", "xx", "--tgt", "yy", *given,
        "--out", tmp_path / "out", "--vocab-size", 300, "--max-len", 50, "--max-len-ratio", 2.5,
        "--character-coverage", 0.99, "--tokenized", "--force")  # fmt: skip
    assert seen["splits"] == {"train": (paths[0], paths[1]), "dev": (paths[2], paths[3])}
    assert seen["length_filter"] == LengthFilter(max_len=50, max_len_ratio=2.5)
    assert (seen["vocab_size"], seen["character_coverage"], seen["force"]) == (300, 0.99, True)
    assert seen["task"] == scoring(True) and seen["out"] == tmp_path / "out"
    run("prepare", "multi30k", "--src", "en", "--tgt", "ja", "--variant", "tok", "--data-dir",
        tmp_path, "--out", tmp_path / "out")  # fmt: skip
    assert seen["splits"] == {"train": ("multi30k", "en", "ja"), "dev": {
        "variant": "tok", "data_dir": tmp_path}}  # fmt: skip
    assert (seen["vocab_size"], seen["character_coverage"], seen["force"]) == (10000, 0.9995, False)
    assert seen["task"] == scoring(True)  # Multi30k's tok variant is lowercased and tokenized
    assert seen["description"] == {"corpus": "multi30k", "variant": "tok", "src": "en", "tgt": "ja"}
    for target, tokenizer in [("ja", "char"), ("zh-TW", "zh"), ("de", "13a")]:  # raw, by --tgt
        run("prepare", "files", "--src", "en", "--tgt", target, *given, "--out", tmp_path / "o")
        assert seen["task"] == TaskConfig(tokenize=tokenizer)
        assert seen["character_coverage"] == (1.0 if target == "de" else 0.9995)
    run("prepare", "ptb", "--data-dir", tmp_path, "--out", tmp_path / "trees", "--tags",
        "--train-fraction", 0.5)  # fmt: skip
    assert seen["treebank"] == (tmp_path, tmp_path / "trees", dict(
        tags=True, vocab_size=16000, train_fraction=0.5, force=False))  # fmt: skip
    for argv, message in (
        (["ptb", "--out", tmp_path], "ptb needs --data-dir"),
        (["files", "--src", "xx", "--out", tmp_path], "files needs --src and --tgt"),
        (
            ["files", "--src", "x", "--tgt", "y", "--train-src", paths[0], "--out", tmp_path],
            "give both --train-src and --train-tgt, or neither",
        ),
        (["files", "--src", "x", "--tgt", "y", *given[:4], "--out", tmp_path], "needs --train-src"),
    ):
        monkeypatch.delenv("TRANSDUCE_DATA", raising=False)
        with pytest.raises(SystemExit, match=message):
            run("prepare", *argv)


def test_demo_compare_and_sweep_hand_their_flags_to_the_experiments(tmp_path, monkeypatch, capsys):
    import transduce.experiments.compare as compare
    import transduce.experiments.demo as demo
    import transduce.experiments.sweep as sweep
    import transduce.experiments.table3 as table3

    seen = {}

    def finished(name: str, report: str):  # an experiment that writes its report and returns
        def experiment(*args, **kwargs):
            seen[name] = (args, kwargs)
            (args[1] / report).write_text(f"{name} report\n")

        return experiment

    monkeypatch.setattr(demo, "run_demo", lambda *a, **kw: seen.update(demo=(a, kw)))
    monkeypatch.setattr(compare, "compare", finished("compare", "results.md"))
    monkeypatch.setattr(sweep, "sweep", finished("sweep", "table3.md"))
    monkeypatch.setattr(
        table3, "params_table", lambda base, vocab, rows: f"{base.model.d_model} {vocab} {rows}\n"
    )
    run("demo", "--data-dir", tmp_path, "--out", tmp_path / "demo", "--minutes", 3, "--preset",
        "tiny", "--src", "fr", "--tgt", "en", "--variant", "raw", "--set", "train.seed=2",
        "--device", "cpu")  # fmt: skip
    assert seen["demo"] == ((tmp_path, tmp_path / "demo"), dict(
        minutes=3.0, src="fr", tgt="en", variant="raw", preset_name="tiny",
        overrides=["train.seed=2"], device="cpu"))  # fmt: skip
    run("compare", "--data", tmp_path, "--out", tmp_path, "--minutes", 2, "--seeds", 3,
        "--size", "small", "--device", "cpu")  # fmt: skip
    assert seen["compare"] == ((tmp_path, tmp_path), dict(
        minutes=2.0, seeds=3, size="small", device="cpu"))  # fmt: skip
    run("sweep", "--data", tmp_path, "--out", tmp_path, "--base", "tiny", "--rows", "base,A1",
        "--seeds", 2, "--one-seed-beyond", 0.5, "--steps", 40, "--jobs", 2, "--device", "cpu",
        "--set", "train.seed=4")  # fmt: skip
    (data, out, base), settings = seen["sweep"]
    assert (data, out, settings["rows"], settings["seeds"]) == (
        tmp_path,
        tmp_path,
        ("base", "A1"),
        2,
    )
    assert (settings["jobs"], settings["one_seed_beyond"], settings["device"]) == (2, 0.5, "cpu")
    assert base == sweep.sweep_base("tiny", steps=40, assignments=["train.seed=4"])
    run("sweep", "--params-only", "--vocab-size", 37000, "--rows", "A1,C2")
    assert capsys.readouterr().out.splitlines() == [
        "compare report", "sweep report", "512 37000 ('A1', 'C2')"]  # fmt: skip
    with pytest.raises(SystemExit, match="--params-only needs --vocab-size"):
        run("sweep", "--params-only")
    with pytest.raises(SystemExit, match="--data is required unless --params-only"):
        run("sweep")


def test_export_hands_the_model_checkpoint_and_quantization_to_the_exporter(tmp_path, monkeypatch):
    import transduce.export as export

    seen = []
    monkeypatch.setattr(export, "export_hf", lambda *given: seen.append(("hf", *given)))
    monkeypatch.setattr(export, "export_ctranslate2", lambda *given: seen.append(("ct2", *given)))
    model, out, checkpoint = tmp_path / "run", tmp_path / "out", tmp_path / "run" / "step_5.pt"
    run("export", "--model", model, "--to", "hf", "--out", out, "--checkpoint", checkpoint)
    run("export", "--model", model, "--to", "ctranslate2", "--out", out, "--quantize", "int8")
    assert seen == [("hf", model, out, checkpoint), ("ct2", model, out, None, "int8")]
    with pytest.raises(SystemExit, match="--quantize applies to --to ctranslate2 only"):
        run("export", "--model", model, "--to", "hf", "--out", out, "--quantize", "int8")


def test_params_prints_the_count_on_its_last_line(capsys):
    run("params", "--preset", "big", "--vocab-size", 37000)
    last = capsys.readouterr().out.splitlines()[-1]
    config = override(preset("big"), {"model.vocab_size": 37000})
    with torch.device("meta"):
        assert int(last) == count_parameters(Transformer(config.model))


@pytest.mark.realdata
def test_the_pipeline_on_real_multi30k(data_dir, tmp_path):
    """prepare -> a few training steps -> translate, through the CLI, on the real corpus."""
    run(
        "prepare",
        "multi30k",
        "--src",
        "en",
        "--tgt",
        "de",
        "--variant",
        "tok",
        "--data-dir",
        data_dir,
        "--vocab-size",
        2000,
        "--out",
        tmp_path / "data",
    )
    run(
        "train",
        "--data",
        tmp_path / "data",
        "--preset",
        "tiny",
        "--out",
        tmp_path / "run",
        "--max-steps",
        3,
        "--set",
        "train.valid_bleu=false",
        "data.max_tokens=1024",
    )
    source = write_lines(tmp_path / "in.txt", ["a man is riding a bike .", "two dogs ."])
    run(
        "translate",
        "--model",
        tmp_path / "run",
        "--input",
        source,
        "--output",
        tmp_path / "out.txt",
        "--max-len-b",
        5,
    )
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 2


def test_set_wins_over_the_config_file_which_wins_over_the_preset(tmp_path):
    """--preset, then --config FILE.yaml, then --set: the later one decides a setting both give."""
    yaml = tmp_path / "run.yaml"
    yaml.write_text("train: {seed: 5, warmup_steps: 123}\n")
    train = ["train", "--data", "d", "--out", "o", "--preset", "tiny", "--config", str(yaml)]
    config = config_from(_parser().parse_args([*train, "--set", "train.seed=9"]))
    assert (config.train.seed, config.train.warmup_steps) == (9, 123)


def test_a_flag_of_zero_still_wins_over_the_config_file_and_set(tmp_path):
    # guards: a flag given as 0 (--seed 0, --max-minutes 0 = no limit) dropped as if left out
    yaml = tmp_path / "run.yaml"
    yaml.write_text("train: {max_minutes: 30}\n")
    train = ["train", "--data", "d", "--out", "o", "--config", str(yaml), "--set", "train.seed=5"]
    args = _parser().parse_args([*train, "--seed", "0", "--max-minutes", "0"])
    flags = {"train.seed": args.seed, "train.max_minutes": args.max_minutes}
    config = config_from(args, flags)
    assert (config.train.seed, config.train.max_minutes) == (0, 0.0)


def test_params_counts_the_model_its_set_and_config_file_describe(tmp_path, capsys):
    # guards: `params` applying --set/--config, not counting the bare preset
    yaml = tmp_path / "wide.yaml"
    yaml.write_text("model: {d_ff: 4096}\n")
    run("params", "--preset", "base", "--vocab-size", 100, "--config", yaml,
        "--set", "model.n_layers=2")  # fmt: skip
    counted = int(capsys.readouterr().out.splitlines()[-1])
    asked = override(preset("base"), {"model.d_ff": 4096, "model.n_layers": 2})
    with torch.device("meta"):
        model = Transformer(override(asked, {"model.vocab_size": 100}).model)
    assert counted == count_parameters(model)
