"""What each verb hands on when its flags are left out (the documented defaults), the flags that
tests/test_cli.py does not give, and how `transduce` itself reports an error, a stop and a
reader that went away. Each verb runs in-process with the library call it makes faked."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from transduce.cli import main


def _run(*argv) -> None:
    main([str(a) for a in argv])


@pytest.fixture
def prepared(monkeypatch):
    """`prepare`'s three library calls faked: what each was handed lands in the dict."""
    import transduce.data.corpus as corpus
    import transduce.data.dataset as dataset
    import transduce.data.ptb as ptb

    seen = {}
    made = SimpleNamespace(
        splits={"train": 0, "dev": 0}, vocab=SimpleNamespace(size=37), meta={"filter_report": "ok"}
    )
    monkeypatch.setattr(dataset, "prepare", lambda splits, out, **kw: seen.update(
        splits=splits, out=out, **kw) or made)  # fmt: skip
    monkeypatch.setattr(ptb, "prepare_treebank", lambda folder, out, **kw: seen.update(
        treebank=(folder, out, kw)) or made)  # fmt: skip
    monkeypatch.setattr(corpus, "corpus_files", lambda *a, **kw: seen.update(files=(a, kw)) or {})
    monkeypatch.delenv("TRANSDUCE_DATA", raising=False)
    return seen


def test_prepare_left_to_its_defaults_reads_raw_text_from_transduce_data(
    prepared, tmp_path, monkeypatch, caplog
):
    """A named corpus: the raw variant from $TRANSDUCE_DATA, 10,000 pieces, pairs up to 250
    subwords and a ratio of 9, scored as detokenized text, not forced; the log names the
    vocabulary's size."""
    from transduce.data.corpus import LengthFilter
    from transduce.tasks.translation import scoring

    monkeypatch.setenv("TRANSDUCE_DATA", str(tmp_path / "corpora"))
    with caplog.at_level(logging.INFO, logger="transduce"):
        _run("prepare", "multi30k", "--src", "en", "--tgt", "de", "--out", tmp_path / "out")
    assert prepared["files"] == (
        ("multi30k", "en", "de"),
        {"variant": "raw", "data_dir": tmp_path / "corpora"},
    )
    assert prepared["length_filter"] == LengthFilter(max_len=250, max_len_ratio=9.0)
    assert (prepared["vocab_size"], prepared["character_coverage"]) == (10000, 1.0)
    assert prepared["task"] == scoring(False) and prepared["force"] is False
    assert "vocabulary 37" in caplog.text


@pytest.mark.parametrize("pair", [("ko", "en"), ("en", "zh"), ("ja", "en")])
def test_a_wide_script_on_either_side_gets_sentencepieces_coverage_for_it(prepared, tmp_path, pair):
    src, tgt = pair
    _run("prepare", "multi30k", "--src", src, "--tgt", tgt, "--out", tmp_path)
    assert prepared["character_coverage"] == 0.9995


def test_prepare_files_reads_a_test_split_when_one_is_given(prepared, tmp_path):
    paths = {f"--{n}-{side}": tmp_path / f"{n}.{side}" for n in ("train", "dev", "test")
             for side in ("src", "tgt")}  # fmt: skip
    flags = [x for flag, path in paths.items() for x in (flag, path)]
    _run("prepare", "files", "--src", "xx", "--tgt", "yy", *flags, "--out", tmp_path / "out")
    assert prepared["splits"]["test"] == (tmp_path / "test.src", tmp_path / "test.tgt")
    assert list(prepared["splits"]) == ["train", "dev", "test"]


def test_the_treebank_is_prepared_untagged_whole_and_with_the_size_and_force_asked(
    prepared, tmp_path
):
    """ptb by default: XX for every tag (as Vinyals et al.), every training tree; --vocab-size
    and --force reach the treebank's preparation."""
    _run("prepare", "ptb", "--data-dir", tmp_path, "--out", tmp_path / "trees")
    assert prepared["treebank"] == (tmp_path, tmp_path / "trees", dict(
        tags=False, vocab_size=16000, train_fraction=1.0, force=False))  # fmt: skip
    _run("prepare", "ptb", "--data-dir", tmp_path, "--out", tmp_path / "trees", "--no-tags",
         "--vocab-size", 800, "--force")  # fmt: skip
    assert prepared["treebank"][2] == dict(
        tags=False, vocab_size=800, train_fraction=1.0, force=True
    )


@pytest.fixture
def experiments(monkeypatch):
    """`demo`, `compare` and `sweep` faked: each records what it was handed and writes its
    report where the verb will read it."""
    import transduce.experiments.compare as compare
    import transduce.experiments.demo as demo
    import transduce.experiments.sweep as sweep

    seen = {}

    def finished(name: str, report: str):
        def experiment(*args, **kwargs):
            seen[name] = (args, kwargs)
            args[1].mkdir(parents=True, exist_ok=True)
            (args[1] / report).write_text(f"{name} report\n")

        return experiment

    monkeypatch.setattr(demo, "run_demo", lambda *a, **kw: seen.update(demo=(a, kw)))
    monkeypatch.setattr(compare, "compare", finished("compare", "results.md"))
    monkeypatch.setattr(sweep, "sweep", finished("sweep", "table3.md"))
    monkeypatch.delenv("TRANSDUCE_DATA", raising=False)
    return seen


def test_the_demo_left_to_its_defaults_runs_multi30k_en_de_for_ten_minutes(
    experiments, tmp_path, monkeypatch
):
    monkeypatch.setenv("TRANSDUCE_DATA", str(tmp_path))
    _run("demo")
    assert experiments["demo"] == ((tmp_path, Path("demo")), dict(
        minutes=10.0, src="en", tgt="de", variant="tok", preset_name=None, overrides=[],
        device=None))  # fmt: skip


def test_compare_left_to_its_defaults_trains_one_seed_of_the_tiny_pair(experiments, tmp_path):
    _run("compare", "--data", tmp_path, "--out", tmp_path / "cmp", "--minutes", 1)
    assert experiments["compare"][1] == dict(minutes=1.0, seeds=1, size="tiny", device=None)


def test_the_sweep_left_to_its_defaults_trains_every_row_once_into_runs_table3_base(
    experiments, tmp_path, monkeypatch, capsys
):
    """Every row of Table 3, one seed, one job, no seed cut, into runs/table3-BASE; the table
    is described by the command that made it, and printed."""
    import sys

    from transduce.experiments.table3 import ROW_NAMES

    monkeypatch.chdir(tmp_path)
    argv = ["sweep", "--data", "d", "--base", "tiny", "--steps", "3"]
    monkeypatch.setattr(sys, "argv", ["transduce", *argv])
    _run(*argv)
    (data, out, _), settings = experiments["sweep"]
    assert (data, out) == (Path("d"), Path("runs/table3-tiny"))
    command = "`transduce sweep --data d --base tiny --steps 3`"
    assert settings == dict(
        rows=ROW_NAMES, seeds=1, device=None, jobs=1, one_seed_beyond=None, description=command
    )
    assert capsys.readouterr().out == "sweep report\n"


def test_a_sweep_takes_minutes_or_steps_not_both(experiments):
    with pytest.raises(SystemExit) as refused:
        _run("sweep", "--data", "d", "--minutes", 1, "--steps", 3)
    assert refused.value.code == 2 and "sweep" not in experiments  # argparse's usage error


def test_attention_beside_draws_this_model_and_each_other_run_on_the_device_and_target(
    tmp_path, monkeypatch, capsys
):
    """--beside: this model first, under its file's name, then each other run, loaded on the
    --device asked; all over the --target given. Each file written is printed on a line."""
    import transduce.viz.views as views
    from transduce.decoding.translate import Translator

    seen = {}
    monkeypatch.setattr(
        Translator, "load", staticmethod(lambda model, device=None: (model, device))
    )
    monkeypatch.setattr(views, "attention_views", lambda *given: [tmp_path / "a.png"])
    monkeypatch.setattr(views, "side_by_side", lambda models, sentence, path, target: seen.update(
        models=models, sentence=sentence, target=target) or path)  # fmt: skip
    _run("attention", "--model", "m.pt", "--sentence", "a b", "--target", "b a", "--out", tmp_path,
         "--beside", "rnn", "--beside", "other", "--device", "meta")  # fmt: skip
    assert seen["models"] == [
        ("m.pt", (Path("m.pt"), "meta")),
        ("rnn", (Path("rnn"), "meta")),
        ("other", (Path("other"), "meta")),
    ]
    assert (seen["sentence"], seen["target"]) == ("a b", "b a")
    printed = capsys.readouterr().out
    assert printed == f"{tmp_path / 'a.png'}\n{tmp_path / 'cross_side_by_side.png'}\n"


def test_explain_left_to_its_defaults_walks_layer_0_of_a_seeded_4_wide_2_head_model(
    monkeypatch, capsys
):
    import importlib

    explain_module = importlib.import_module("transduce.viz.explain")  # the name is a function's
    seen = {}

    class Found:
        def text(self, decimals: int) -> str:
            return f"text to {decimals} decimals"

    monkeypatch.setattr(explain_module, "explain", lambda sentence, model, **settings: seen.update(
        explain=(sentence, model, settings)) or Found())  # fmt: skip
    _run("explain", "--sentence", "a b")
    assert seen["explain"] == ("a b", None, {"seed": 0, "d_model": 4, "heads": 2, "layer": 0})
    assert capsys.readouterr().out == "text to 4 decimals\n"


def test_serve_without_its_extra_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transduce.serve.server", None)  # as if not installed
    with pytest.raises(
        SystemExit, match=r"transduce serve: error: .*pip install 'transduce\[serve\]'"
    ):
        _run("serve", "--model", "m.pt")


def test_serve_on_a_thread_loads_the_engine_on_the_device_and_in_int8_as_asked(monkeypatch):
    import transduce.serve.engine as engine_module
    import transduce.serve.server as server_module

    seen = {}
    monkeypatch.setattr(server_module, "serve", lambda engine, settings, quiet: seen.update(
        engine=engine))  # fmt: skip
    monkeypatch.setattr(engine_module.Engine, "load", staticmethod(lambda *given: given))
    _run("serve", "--model", "m.pt", "--decoder", "thread", "--device", "cpu", "--int8")
    assert seen["engine"] == ([Path("m.pt")], "cpu", True, None, None)  # no channel, the run's


def _failing(monkeypatch, error: BaseException) -> None:
    """`transduce prepare` made to raise `error` (argparse bound the verb when main built it)."""
    import transduce.cli.data as data_verbs

    def fails(args):
        raise error

    monkeypatch.setattr(data_verbs, "_prepare", fails)


@pytest.mark.parametrize(
    "kind",
    [
        "TrainingError",
        "RunFolderError",
        "CheckpointError",
        "FileNotFoundError",
        "MainProcessFailed",  # guards: a worker of a multi-process run failing with a traceback
    ],
)
def test_each_expected_failure_is_one_line_naming_the_verb_not_a_traceback(monkeypatch, kind):
    """The errors that are not ValueErrors (those are caught as ValueError) each end the
    command with its message after the verb's name."""
    from transduce.training.checkpoint import CheckpointError
    from transduce.training.distributed import MainProcessFailed
    from transduce.training.loop import TrainingError
    from transduce.training.runlog import RunFolderError

    known = [TrainingError, RunFolderError, CheckpointError, FileNotFoundError, MainProcessFailed]
    error = {e.__name__: e for e in known}
    _failing(monkeypatch, error[kind]("what went wrong"))
    with pytest.raises(SystemExit) as exit_:
        _run("prepare", "files", "--out", "o")
    assert exit_.value.code == "transduce prepare: error: what went wrong"


def test_an_error_it_does_not_expect_is_not_silenced(monkeypatch):
    _failing(monkeypatch, RuntimeError("a bug"))
    with pytest.raises(RuntimeError):
        _run("prepare", "files", "--out", "o")


def test_an_os_error_is_one_line_naming_the_path(monkeypatch):
    """A folder given where a file goes, a file without permission: the path and the reason."""
    _failing(monkeypatch, IsADirectoryError(21, "Is a directory", "out/test.hyp"))
    with pytest.raises(SystemExit) as exit_:
        _run("prepare", "files", "--out", "o")
    assert exit_.value.code == "transduce prepare: error: out/test.hyp: Is a directory"


def test_without_a_verb_transduce_shows_its_usage_and_fails(capsys):
    with pytest.raises(SystemExit) as exit_:
        _run()
    assert exit_.value.code == 2 and capsys.readouterr().err.startswith("usage: transduce ")


def test_a_stop_without_a_message_says_only_interrupted(monkeypatch):
    _failing(monkeypatch, KeyboardInterrupt())
    with pytest.raises(SystemExit) as exit_:
        _run("prepare", "files", "--out", "o")
    assert exit_.value.code == "transduce prepare: interrupted"


def test_a_reader_that_went_away_ends_the_command_quietly(monkeypatch):
    """`transduce ... | head -1`: the rest of the output goes to /dev/null, no traceback and
    no error status."""
    import io
    import os
    import sys

    class Stdout(io.StringIO):
        def fileno(self) -> int:
            return 99

    moved = []
    monkeypatch.setattr(sys, "stdout", Stdout())
    monkeypatch.setattr(os, "dup2", lambda fd, onto: moved.append((fd, onto)))
    _failing(monkeypatch, BrokenPipeError())
    _run("prepare", "files", "--out", "o")  # returns: status 0
    ((devnull, onto),) = moved
    os.close(devnull)
    assert onto == 99


@pytest.mark.parametrize("quiet, level", [(True, logging.WARNING), (False, logging.INFO)])
def test_quiet_logs_warnings_only(monkeypatch, quiet, level):
    seen = {}
    monkeypatch.setattr(logging, "basicConfig", lambda **settings: seen.update(settings))
    _failing(monkeypatch, KeyboardInterrupt())
    with pytest.raises(SystemExit):
        _run(*(["-q"] if quiet else []), "prepare", "files", "--out", "o")
    assert seen["level"] == level


def test_version_prints_the_package_and_its_version(capsys):
    from transduce import __version__

    with pytest.raises(SystemExit) as exit_:
        _run("--version")
    assert exit_.value.code == 0 and capsys.readouterr().out == f"transduce {__version__}\n"


def test_translate_and_serve_size_the_product_caches_for_decoding_before_loading(monkeypatch):
    """Processes that only decode keep matmul.DECODING_CACHED_PRODUCTS compiled products (the
    libraries read the setting at the first product, so it is set before the model loads); a
    setting the user made stays theirs."""
    import transduce.decoding.translate as translate_module
    import transduce.serve.server as server_module
    import transduce.serve.worker as worker_module
    from transduce.models import bf16, matmul

    first, second = bf16.CACHE_SETTINGS
    at_load = []

    def record(*args, **kwargs):
        at_load.append((os.environ[first], os.environ[second]))
        raise KeyboardInterrupt  # enough: what the caches were when the model loaded

    monkeypatch.setattr(translate_module.Translator, "load", staticmethod(record))
    monkeypatch.setattr(worker_module, "DecoderProcess", record)
    monkeypatch.setattr(server_module, "serve", lambda *a, **kw: None)
    wanted = str(matmul.DECODING_CACHED_PRODUCTS)
    for user_set, verb in ((frozenset(), "translate"), ({second}, "serve")):
        monkeypatch.setattr(bf16, "USER_SET", frozenset(user_set))
        monkeypatch.setenv(first, "8")  # as matmul leaves them on import
        monkeypatch.setenv(second, "5")
        with pytest.raises(SystemExit):
            _run(verb, "--model", "m.pt")
    assert at_load == [(wanted, wanted), (wanted, "5")]
