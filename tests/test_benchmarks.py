"""The benchmark scripts still run against the code they measure (a dry run on the CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


ALL_OPTIONS = [
    "--sync-each-update",
    "--seen-shapes",
    "--profile-fresh",
    "--sdpa",
    "math",
    "--cuda-graphs",
    "--loss-form",
    "logits",
    "--stacked-products",
    "off",
    "--inductor",
    "split_reductions=False",
]


@pytest.mark.parametrize("options", [ALL_OPTIONS, []], ids=["every-option", "no-option"])
def test_the_gpu_speed_benchmark_runs_the_trainers_own_update(tmp_path, options):
    """speed_gpu.py drives the Trainer's private update on its own batches: when the Trainer's
    insides change (session 22's epochs), a dry run on the CPU must still measure every option
    used on a GPU, and the plain run too (a bug on the path without an option once hid behind
    a test that gave them all), or the device time is lost to a traceback (each setting's error
    is printed and skipped, so the row's absence is the failure)."""
    out = tmp_path / "speed.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "speed_gpu.py"), "--wmt-lengths"]
    command += ["--presets", "tiny", "--updates", "3", "--warmup", "1", "--max-tokens", "600"]
    command += ["--compile", "off", "--out", str(out), *options]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["preset"] == "tiny" and row["target_tokens_per_update"] > 0
    given = bool(options)
    assert row["updates_timed"] == 2 and row["timed_updates_compiling"] == 0  # none compiled
    assert row["seconds_per_update_not_compiling"] == pytest.approx(row["seconds_per_update"])
    assert row["sync_each_update"] == row["seen_shapes"] == row["cuda_graphs"] == given
    assert row["loss_form"] == ("logits" if given else "chunked")
    assert row["stacked_products"] == ("off" if given else "on")
    assert row["inductor"] == (["split_reductions=False"] if given else [])
    assert ("aten::" in done.stdout) == given  # the profile was printed


def test_the_training_step_benchmark_runs_the_trainers_own_update(tmp_path):
    """train_step.py, the CPU's A/B of a change to the update, on a toy dataset: it went
    unnoticed for sessions that it no longer ran against the Trainer's epochs."""
    from .conftest import prepared_reverse_task

    data = prepared_reverse_task(tmp_path, n_train=300, n_dev=10)
    command = [sys.executable, str(ROOT / "benchmarks" / "train_step.py"), "--prepared", str(data)]
    command += ["--preset", "tiny", "--updates", "4", "--timed", "2", "--threads", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "target tokens/s over 2 updates" in done.stdout


def test_the_batch_shapes_benchmark_counts_both_cuts():
    """batch_shapes.py prints, for mixed and one-source-length batches, the small batches that
    recompiled a GPU's layers (SPEED.md, session 37): the one-length cut now makes none."""
    command = [sys.executable, str(ROOT / "benchmarks" / "batch_shapes.py"), "--pairs", "20000"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    mixed, one_length = done.stdout.splitlines()
    assert mixed.startswith("mixed lengths") and "sources padded 0 " not in mixed
    assert one_length.startswith("one source length") and "single sentence 0 " in one_length


def test_a_benchmark_records_which_cpu_it_ran_on():
    """Family and model tell apart two machines both named "AMD EPYC", and the ISA list says
    whether AVX-512 or VNNI was there (the decode benchmark's record carries it)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import peers

    cpuinfo = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
        "model name\t: AMD EPYC\ncache size\t: 512 KB\nflags\t\t: fpu sse2 avx avx2 fma vaes\n"
        "processor\t: 1\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
    )
    identity = peers.cpu_identity(cpuinfo)
    assert [identity[key] for key in ("vendor", "family", "model")] == ["AuthenticAMD", "25", "1"]
    assert identity["name"] == "AMD EPYC" and identity["l2_cache"] == "512 KB"
    assert identity["isa"] == ["avx", "avx2"]
    intel = "model name\t: Xeon\nflags\t\t: avx2 avx512f avx512_vnni amx_tile\n"
    assert peers.cpu_identity(intel)["isa"] == ["amx_tile", "avx2", "avx512_vnni", "avx512f"]
    assert peers.cpu_identity("")["name"] == "unknown"


def test_the_prefix_benchmark_counts_next_words_and_runs(tmp_path):
    """prefix_completion.py: a glued piece counts as a wrong next word and a reference of at
    most k words is not asked; the script runs a model over a prepared folder's text."""
    from .conftest import save_toy_model, write_lines

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import prefix_completion

    outputs, references = ["a b c", "a bc d", "x"], ["a b d", "a b c", "x"]
    assert prefix_completion.next_words(outputs, references, 1) == (1, 2)
    assert prefix_completion.next_words(outputs, references, 0) == (3, 3)
    assert prefix_completion.typed("ein kleiner hund", 2, 0) == "ein kleiner "
    assert prefix_completion.typed("ein kleiner hund", 1, 2) == "ein kl"
    assert prefix_completion.typed("ein hund", 2, 2) == "ein hund "
    model = save_toy_model(tmp_path)
    write_lines(tmp_path / "test.src.txt", ["the dog runs", "green grass"])
    write_lines(tmp_path / "test.tgt.txt", ["the green dog", "children playing outside"])
    command = [sys.executable, str(ROOT / "benchmarks" / "prefix_completion.py"), "--model",
               str(model), "--data", str(tmp_path), "--words", "0", "2", "--beam", "2"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[1].startswith("k = 0, 0 letters: next word ")
    assert lines[2].startswith("k = 2, 0 letters: next word ")
    assert "/2 = " in lines[1] and "/2 = " in lines[2]  # both references have three words


def test_the_terms_benchmark_draws_missed_words_and_runs(tmp_path):
    """terms.py: the terms are reference words the output lacks, long enough, at most N, in
    the reference's order; held counts whole words; the script runs over a prepared folder."""
    import random

    from .conftest import save_toy_model, write_lines

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import terms

    rng = random.Random(0)
    reference = "ein kleiner hund rennt über das gras ."
    assert terms.missed("ein hund läuft über das gras .", reference, 5, 4, rng, True) == [
        "kleiner", "rennt"]  # fmt: skip
    assert len(terms.missed("ein hund", reference, 1, 4, rng, True)) == 1
    assert terms.held(["ein kleiner hund", "kleinere"], [["kleiner", "hund"], ["kleiner"]],
                      True) == 2  # fmt: skip
    # Running Japanese: words drawn from the tokenized reference, held inside the text.
    assert terms.missed("私は猫が好き", "私 は 犬 が 好き", 5, 1, rng, False) == ["犬"]
    assert terms.held(["私は犬が好き", "子犬"], [["犬"], ["犬"]], False) == 2
    assert terms.held(["私 は 犬 が", "子犬"], [["犬"], ["犬"]], True) == 1
    model = save_toy_model(tmp_path)
    write_lines(tmp_path / "test.src.txt", ["the dog runs", "green grass"])
    write_lines(tmp_path / "test.tgt.txt", ["the green dog", "children playing outside"])
    words = write_lines(tmp_path / "words.txt", ["a b c", "d e f"])  # none long enough
    command = [sys.executable, str(ROOT / "benchmarks" / "terms.py"), "--model", str(model),
               "--data", str(tmp_path), "--terms", "1", "--beams", "2",
               "--words", str(words)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[1].startswith("beam 2, 1 term(s) a line (0 in all")
