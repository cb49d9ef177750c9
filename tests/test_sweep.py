"""`transduce sweep`: Table 3's rows scaled to a base change exactly what the paper's rows change;
the sweep trains and scores each row, reports a failed row and goes on, and resumes without
training a finished row again; `--params-only` prints our counts beside the paper's."""

import dataclasses
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
import torch

from transduce.cli import main
from transduce.config import Config, ConfigError, DecodeConfig, override
from transduce.experiments import sweep as sweep_module
from transduce.experiments import table3
from transduce.experiments.sweep import RunResult, sweep, sweep_base
from transduce.experiments.table3 import ROW_NAMES, CannotScale, row_config
from transduce.presets import big, preset
from transduce.training import members

from .conftest import PLUMBING_MODEL, as_set_arguments, small_reverse_data

# What each row of the paper's Table 3 names (the cells it fills in), in our field names.
HEADS = frozenset({"model.h", "model.d_k", "model.d_v"})
WIDTH = frozenset({"model.d_model", "model.d_k", "model.d_v"})
NAMED = {
    "base": frozenset(),
    **dict.fromkeys(["A1", "A2", "A3", "A4"], HEADS),
    **dict.fromkeys(["B1", "B2"], frozenset({"model.d_k"})),
    **dict.fromkeys(["C1", "C2", "C3"], frozenset({"model.n_layers"})),
    **dict.fromkeys(["C4", "C5"], WIDTH),
    **dict.fromkeys(["C6", "C7"], frozenset({"model.d_ff"})),
    **dict.fromkeys(["D1", "D2"], frozenset({"model.dropout"})),
    **dict.fromkeys(["D3", "D4"], frozenset({"train.label_smoothing"})),
    "E1": frozenset({"model.positions"}),
    "big": frozenset(
        {"model.d_model", "model.d_ff", "model.h", "model.dropout", "train.max_steps"}
    ),
}
# The paper's parameter counts (x 10^6), Table 3.
PAPER_PARAMS_M = {
    "base": 65, "B1": 58, "B2": 60, "C1": 36, "C2": 50, "C3": 80, "C4": 28, "C5": 168,
    "C6": 53, "C7": 90, "big": 213,
}  # fmt: skip


def _flat(config) -> dict:
    tree = dataclasses.asdict(config)
    return {f"{section}.{k}": v for section, values in tree.items() for k, v in values.items()}


def _changed(config, base) -> set[str]:
    new, old = _flat(config), _flat(base)
    return {key for key in new if new[key] != old[key]}


@pytest.mark.parametrize("name", ["tiny", "small", "base"])
def test_each_row_changes_exactly_the_fields_the_paper_names(name):
    base = sweep_base(name, steps=100)
    assert set(ROW_NAMES) == set(NAMED)
    for row in ROW_NAMES:
        assert _changed(row_config(base, row), base) == NAMED[row], row


def test_rows_scale_relative_to_the_base_and_equal_the_papers_from_base():
    tiny = sweep_base("tiny", steps=100)  # N 4, d_model 128, d_ff 256, h 4, d_k 32, P_drop 0.3
    m = {row: row_config(tiny, row).model for row in ROW_NAMES}
    assert [(m[r].h, m[r].d_k, m[r].d_v) for r in ("A1", "A2", "A3", "A4")] == [
        (1, 128, 128), (2, 64, 64), (8, 16, 16), (16, 8, 8)
    ]  # fmt: skip
    assert (m["B1"].d_k, m["B2"].d_k) == (8, 16)  # a quarter, a half
    assert [m[r].n_layers for r in ("C1", "C2", "C3")] == [1, 3, 5]  # 2/6, 4/6, 8/6 of 4
    assert (m["C4"].d_model, m["C4"].d_k, m["C5"].d_model, m["C5"].d_v) == (64, 16, 256, 64)
    assert (m["D1"].dropout, m["D2"].dropout, m["big"].dropout) == (0.0, 0.4, 0.5)
    assert (m["big"].d_model, m["big"].d_ff, m["big"].h, m["big"].d_k) == (256, 512, 8, 32)
    assert row_config(tiny, "big").train.max_steps == 300  # 300K against 100K
    # From the paper's base, each row is the one the paper prints (presets.py).
    paper = preset("base")
    for row in ROW_NAMES:
        assert row_config(paper, row) == (big() if row == "big" else preset(row)), row


def test_a_row_that_cannot_be_scaled_says_why():
    one_head = sweep_base("tiny", assignments=["model.h=1", "model.d_k=2", "model.d_v=2"])
    with pytest.raises(CannotScale, match="heads"):
        row_config(one_head, "A2")  # half a head
    with pytest.raises(CannotScale, match=r"model\.d_k"):
        row_config(one_head, "B1")  # d_k 0.5
    with pytest.raises(CannotScale, match=r"model\.dropout"):
        row_config(sweep_base("tiny", assignments=["model.dropout=0.9"]), "big")
    # D1 (P_drop 0.0) at a base without dropout would be the base again
    with pytest.raises(CannotScale, match=r"already has model\.dropout = 0\.0"):
        row_config(sweep_base("tiny", assignments=["model.dropout=0.0"]), "D1")


def test_params_only_prints_ours_beside_the_papers(capsys):
    main(["sweep", "--rows", "table3", "--params-only", "--vocab-size", "37000"])
    lines = capsys.readouterr().out.splitlines()[2:]
    cells = {line.split(" | ")[0].strip("| "): line.strip("| ").split(" | ") for line in lines}
    assert list(cells) == list(PAPER_PARAMS_M)  # one line per row that states a count
    assert cells["base"][-2:] == ["63.1", "65"]
    for row, paper in PAPER_PARAMS_M.items():
        ours, theirs = float(cells[row][-2]), int(cells[row][-1])
        assert theirs == paper and abs(ours / paper - 1) < 0.07, row


QUICK = PLUMBING_MODEL | {
    "model.h": 1,  # so that row A2 (half the heads) cannot be scaled
    "train.warmup_steps": 2,  # so that the average of the last 2 differs from the last
    "train.valid_every": 3,
    "train.keep_last": 2,
    "train.average_last": 2,
}
ROWS = ["base", "A2", "B1", "D3"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return small_reverse_data(tmp_path_factory.mktemp("sweep"))


def test_a_failed_row_is_reported_and_a_resumed_sweep_trains_only_what_is_unfinished(
    data, tmp_path, monkeypatch, capsys
):
    real_train, trained = sweep_module.train, []

    def train_failing_b1(config, data_dir, run_dir, **kwargs):
        trained.append(run_dir.name)
        if run_dir.name.startswith("B1"):
            raise RuntimeError("out of patience")
        return real_train(config, data_dir, run_dir, **kwargs)

    monkeypatch.setattr(sweep_module, "train", train_failing_b1)
    base = sweep_base("tiny", steps=4, assignments=as_set_arguments(QUICK))
    first = {r.row: r for r in sweep(data.path, tmp_path, base, rows=ROWS, seeds=2)}
    assert trained == ["base-seed1", "B1-seed1", "D3-seed1", "base-seed2", "B1-seed2", "D3-seed2"]
    assert first["A2"].config is None and "heads" in first["A2"].note
    assert all(run.error == "RuntimeError: out of patience" for run in first["B1"].runs)
    for row in ("base", "D3"):
        assert [run.error for run in first[row].runs] == ["", ""]
        assert all(run.dev_ppl > 1 and run.updates == 4 for run in first[row].runs)
    # Scored as the paper's Table 3: the last checkpoint, not an average of the last ones.
    for run in first["base"].runs:
        log = (tmp_path / f"base-seed{run.seed}" / "log.jsonl").read_text().splitlines()
        last = [json.loads(line) for line in log if '"valid"' in line][-1]
        assert last["step"] == 4 and run.dev_ppl == pytest.approx(last["ppl"], rel=1e-9)
        elapsed = max(json.loads(line)["elapsed"] for line in log)
        assert run.minutes == pytest.approx(elapsed / 60)  # training wall time, in minutes
    table = (tmp_path / "table3.md").read_text()
    assert "cannot scale" in table and "out of patience" in table and " ± " in table
    assert len((tmp_path / "table3.csv").read_text().splitlines()) == 1 + len(ROWS)

    # Resumed: only the failed row trains again; the finished rows keep their results.
    trained.clear()
    monkeypatch.setattr(sweep_module, "train", _recording(real_train, trained))
    real_score, beams = sweep_module.translate_and_score, []

    def score_recording_the_beam(translator, *args):
        beams.append(translator.decode.beam_size)
        return real_score(translator, *args)

    monkeypatch.setattr(sweep_module, "translate_and_score", score_recording_the_beam)
    args = ["sweep", "--data", data.path, "--base", "tiny", "--rows", ",".join(ROWS)]
    args += ["--seeds", "2", "--steps", "4", "--out", tmp_path, "--set", *as_set_arguments(QUICK)]
    main([str(a) for a in args])
    assert trained == ["B1-seed1", "B1-seed2"]
    assert beams == [4, 4]  # s6.1's beam search (the task's), not validation's greedy search
    again = json.loads((tmp_path / "table3.json").read_text())["rows"]
    assert [r["runs"] for r in again if r["row"] == "base"] == [
        [dataclasses.asdict(run) for run in first["base"].runs]
    ]
    assert all(not run["error"] for r in again for run in r["runs"])
    assert "| B1 |" in capsys.readouterr().out


def _recording(train, calls):
    def recorded(config, data_dir, run_dir, **kwargs):
        calls.append(run_dir.name)
        return train(config, data_dir, run_dir, **kwargs)

    return recorded


def test_rows_far_from_the_base_keep_one_seed(data, tmp_path, monkeypatch):
    """Far from the base's mean over its seeds (30.1 here), not from its first seed: C2 is 1.05
    from the base's first seed but 0.95 from its mean (two more seeds), E1 0.95 and 1.05 (one);
    the rows' later seeds wait for every seed of the base."""
    first_seed_bleu = {"base": 30.0, "B1": 28.9, "C2": 31.05, "D3": 30.8, "E1": 29.05}
    calls = []

    def scripted_run(config, row, seed, data, run_dir, device):
        calls.append(f"{row}-{seed}")
        score = first_seed_bleu[row] + 0.1 * (seed - 1)
        return RunResult(row, seed, dev_ppl=5.0, dev_score=score, parameters=1, updates=4,
                         minutes=0.1)  # fmt: skip

    monkeypatch.setattr(sweep_module, "_run", scripted_run)
    base = sweep_base("tiny", steps=4)
    rows = ["base", "B1", "C2", "D3", "E1"]
    sweep(data.path, tmp_path, base, rows=rows, seeds=3, one_seed_beyond=1.0)
    assert calls == ["base-1", "B1-1", "C2-1", "D3-1", "E1-1", "base-2", "base-3",
                     "C2-2", "D3-2", "C2-3", "D3-3"]  # fmt: skip


@pytest.fixture
def torch_threads():
    """Runs set torch's threads (train.threads); the test's process gets its own back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_runs_side_by_side_in_processes_of_their_own_learn_what_one_at_a_time_learns(
    data, tmp_path, monkeypatch, torch_threads
):
    base = sweep_base("tiny", steps=4, assignments=[*as_set_arguments(QUICK), "train.threads=1"])
    alone = sweep(data.path, tmp_path / "alone", base, rows=["base", "D3"])

    def not_here(*args, **kwargs):
        raise AssertionError("trained in the sweep's own process")

    monkeypatch.setattr(sweep_module, "train", not_here)  # the processes import their own
    side_by_side = sweep(data.path, tmp_path / "two", base, rows=["base", "D3"], jobs=2)
    for one, two in zip(alone, side_by_side, strict=True):
        [first], [second] = one.runs, two.runs
        assert not second.error and second.updates == first.updates == 4
        assert second.dev_ppl == pytest.approx(first.dev_ppl, rel=1e-5)
        assert second.dev_score == pytest.approx(first.dev_score, abs=1e-6)
    assert "| D3 |" in (tmp_path / "two" / "table3.md").read_text()


def test_side_by_side_a_next_seed_waits_for_its_rows_first_and_every_seed_of_the_base(
    data, tmp_path, monkeypatch, torch_threads
):
    first_seed_bleu = {"base": 30.0, "B1": 28.9, "D3": 30.8, "E1": 29.5}  # B1 is 1.1 away
    events, lock, inside = [], threading.Lock(), [0, 0]  # [now, most] running at once

    def scripted_run(config, row, seed, data, run_dir, device):
        with lock:
            events.append(("start", row, seed))
            inside[0] += 1
            inside[1] = max(inside)
        time.sleep(0.6 if (row, seed) == ("base", 1) else 0.1)  # the slowest by far
        with lock:
            events.append(("end", row, seed))
            inside[0] -= 1
        return RunResult(row, seed, dev_ppl=5.0, dev_score=first_seed_bleu[row] + 0.1 * seed,
                         parameters=1, updates=4, minutes=0.1)  # fmt: skip

    monkeypatch.setattr(sweep_module, "_run", scripted_run)
    monkeypatch.setattr(sweep_module, "_workers", lambda jobs: ThreadPoolExecutor(jobs))
    rows = ["base", "B1", "D3", "E1"]
    results = sweep(data.path, tmp_path, sweep_base("tiny", steps=4), rows=rows, seeds=2,
                    one_seed_beyond=1.0, jobs=2)  # fmt: skip
    started = [(row, seed) for kind, row, seed in events if kind == "start"]
    assert sorted(started) == sorted([("base", 1), ("B1", 1), ("D3", 1), ("E1", 1),
                                      ("base", 2), ("D3", 2), ("E1", 2)])  # fmt: skip
    assert inside[1] == 2  # two at a time, never more
    for row in ("base", "D3", "E1"):
        second = events.index(("start", row, 2))
        assert events.index(("end", row, 1)) < second
        assert events.index(("end", "base", 1)) < second
        if row != "base":
            assert events.index(("end", "base", 2)) < second
    assert [len(r.runs) for r in results] == [2, 1, 2, 2]
    assert [run.seed for run in results[0].runs] == [1, 2]


def test_a_process_that_dies_fails_its_run_and_the_sweep_goes_on(data, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_module, "_task", dies_on_b1)  # sent by name to the processes
    rows = ["B1", "base", "D3", "E1"]  # base ends, D3 starts, then B1 dies while D3 runs
    results = sweep(data.path, tmp_path, sweep_base("tiny", steps=4), rows=rows, jobs=2)
    died = "its process died; run the sweep again to resume it"
    errors = {r.row: [run.error for run in r.runs] for r in results}
    assert errors == {"B1": [died], "base": [""], "D3": [died], "E1": [""]}  # E1: a fresh pool
    # D3 took base's place: in a process of its own, nothing carried over from base's run
    assert (tmp_path / "D3-started").read_text() != results[1].runs[0].signature
    table = (tmp_path / "table3.md").read_text()
    assert "process died" in table and "| E1 |" in table


def dies_on_b1(config, row, seed, data_dir, run_dir, device, log_level):
    """B1 dies once D3 has started; D3 starts only when base has ended (two at a time). Markers,
    not sleeps: a loaded machine once let B1 die before base's result had come back."""
    d3_started = run_dir.parent / "D3-started"
    if row == "B1":
        _wait_for(d3_started)
        os._exit(3)  # as the kernel's OOM killer would leave it: no exception, no result
    if row == "D3":
        d3_started.write_text(str(os.getpid()))
        time.sleep(60)  # until the broken pool ends its process
    return RunResult(row, seed, dev_ppl=5.0, dev_score=30.0, signature=str(os.getpid()),
                     parameters=1, updates=4, minutes=0.1)  # fmt: skip


def test_a_pool_that_broke_since_the_last_wait_is_replaced_at_the_next_submit(
    data, tmp_path, monkeypatch
):  # fmt: skip
    class BrokenPool:  # a run died after the wait returned, before the next submit
        def submit(self, *task):
            raise BrokenProcessPool("a child process terminated abruptly")

        def shutdown(self, wait=True, cancel_futures=False):
            pass

    pools = [sweep_module._InProcess(), BrokenPool()]
    monkeypatch.setattr(sweep_module, "_workers", lambda jobs: pools.pop())
    monkeypatch.setattr(sweep_module, "_task", dies_on_b1)
    results = sweep(data.path, tmp_path, sweep_base("tiny", steps=4), rows=["base"], jobs=2)
    assert [run.error for run in results[0].runs] == [""] and not pools


def _wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_finished_run_is_kept_when_only_its_threads_change(data, tmp_path, monkeypatch,
                                                             torch_threads):  # fmt: skip
    real_train, trained = sweep_module.train, []
    monkeypatch.setattr(sweep_module, "train", _recording(real_train, trained))
    quick = as_set_arguments(QUICK)
    sweep(data.path, tmp_path, sweep_base("tiny", steps=4, assignments=quick), rows=["base"])
    again = sweep_base("tiny", steps=4, assignments=[*quick, "train.threads=1"])
    sweep(data.path, tmp_path, again, rows=["base"])  # the speed, not what is learned
    assert trained == ["base-seed1"]
    smoothed = sweep_base("tiny", steps=4, assignments=[*quick, "train.label_smoothing=0.2"])
    sweep(data.path, tmp_path, smoothed, rows=["base"])  # what is learned: trained again
    assert trained == ["base-seed1", "base-seed1"]


def test_the_sweep_scores_with_the_tasks_beam_search_and_knows_the_kept_table3_runs():
    """A preset's own decoding choice (`tiny`'s alpha 1.0) stays out of Table 3's scoring, and a
    fresh clone's `benchmarks/table3.sh` finds its kept runs finished rather than training the
    whole table (~4.5 hours) again."""
    assert preset("tiny").decode.alpha == 1.0
    assert sweep_base("tiny", steps=600).decode == DecodeConfig()  # beam 4, alpha 0.6
    kept_dir = Path(__file__).parent.parent / "benchmarks/runs/table3-tiny"
    table3_sh = [  # its --set, at the defaults STEPS=600 and WARMUP=200
        "train.warmup_steps=200", "train.lr_scale=0.8", "train.valid_every=250", "train.cooldown=0"
    ]  # fmt: skip
    base = sweep_base("tiny", steps=600, assignments=table3_sh)
    for row in ("base", "A1", "D1", "E1"):
        kept = json.loads((kept_dir / f"{row}-seed1/sweep-result.json").read_text())
        asked = override(row_config(base, row), {"train.seed": 1})  # as `sweep` asks
        assert sweep_module._same_training(Config.from_dict(kept["config"]), asked), row


def test_a_budget_in_minutes_lifts_the_presets_step_limit():
    """`--minutes` alone trains for the minutes, not until the preset's own max_steps stops it."""
    assert preset("tiny").train.max_steps < 10**9
    timed = sweep_base("tiny", minutes=5).train
    assert (timed.max_minutes, timed.max_steps) == (5, 10**9)
    both = sweep_base("tiny", minutes=5, steps=7).train
    assert (both.max_minutes, both.max_steps) == (5, 7)


def test_a_sweep_refuses_fewer_than_one_job(tmp_path):
    with pytest.raises(ValueError, match="jobs must be at least 1, not 0"):
        sweep(tmp_path, tmp_path, sweep_base("tiny", steps=4), jobs=0)


def _scripted(scores: dict, calls: list):
    """A `_run` that records its calls and scores (row, seed) as `scores` says (None: fails)."""

    def scripted_run(config, row, seed, data, run_dir, device):
        calls.append(f"{row}-{seed}")
        score = scores[row, seed]
        if score is None:
            return RunResult(row, seed, error="RuntimeError: out of patience")
        return RunResult(row, seed, dev_ppl=5.0, dev_score=score, parameters=1, updates=4,
                         minutes=0.1)  # fmt: skip

    return scripted_run


def test_exactly_one_seed_beyond_keeps_one_and_a_failed_base_seed_is_not_in_the_mean(
    data, tmp_path, monkeypatch, caplog
):
    """B1 is exactly 1.0 from the base's mean (30.0 over its finished seeds, the failed seed 2
    left out): at least `one_seed_beyond` away, it keeps one seed; C2 (0.5 away) keeps three."""
    scores = {("base", 1): 30.0, ("base", 2): None, ("base", 3): 30.0, ("B1", 1): 31.0}
    scores |= {("C2", seed): 30.5 for seed in (1, 2, 3)}
    calls = []
    monkeypatch.setattr(sweep_module, "_run", _scripted(scores, calls))
    caplog.set_level("INFO", logger=sweep_module.__name__)
    sweep(data.path, tmp_path, sweep_base("tiny", steps=4), rows=["base", "B1", "C2"], seeds=3,
          one_seed_beyond=1.0)  # fmt: skip
    assert calls == ["base-1", "B1-1", "C2-1", "base-2", "base-3", "C2-2", "C2-3"]
    assert "row B1: 1.00 from the base's mean with seed 1: one seed" in caplog.text


def test_the_base_keeps_every_seed_however_far_its_seeds_spread(data, tmp_path, monkeypatch):
    """The one-seed rule measures the other rows against the base; the base itself is not cut
    short (its seed 1 is 1.5 from its mean after two seeds)."""
    calls = []
    scores = {("base", 1): 30.0, ("base", 2): 33.0, ("base", 3): 30.0}
    monkeypatch.setattr(sweep_module, "_run", _scripted(scores, calls))
    sweep(data.path, tmp_path, sweep_base("tiny", steps=4), rows=["base"], seeds=3,
          one_seed_beyond=1.0)  # fmt: skip
    assert calls == ["base-1", "base-2", "base-3"]


@pytest.mark.parametrize("threads, each", [(0, 4), (3, 3)])
def test_runs_side_by_side_share_the_cores_unless_their_threads_are_set(
    data, tmp_path, monkeypatch, torch_threads, threads, each
):
    seen = []

    def scripted_run(config, row, seed, data, run_dir, device):
        seen.append((config.train.threads, torch.get_num_threads()))
        return RunResult(row, seed, dev_ppl=5.0, dev_score=30.0, parameters=1, updates=4,
                         minutes=0.1)  # fmt: skip

    monkeypatch.setattr(sweep_module, "_run", scripted_run)
    monkeypatch.setattr(sweep_module, "_workers", lambda jobs: ThreadPoolExecutor(jobs))
    monkeypatch.setattr(members.os, "cpu_count", lambda: 8)
    base = sweep_base("tiny", steps=4, assignments=[f"train.threads={threads}"])
    sweep(data.path, tmp_path, base, rows=["base", "D3"], jobs=2)
    assert seen == [(each, each)] * 2  # 8 cores shared by 2 jobs, or the threads asked for


def test_a_run_killed_before_it_finished_resumes_from_its_checkpoints(data, tmp_path, monkeypatch):
    (tmp_path / "base-seed1" / "checkpoints").mkdir(parents=True)  # killed: no average.pt
    asked = []

    def train_recording_resume(config, data_dir, run_dir, resume, device):
        asked.append((run_dir.name, resume))
        raise RuntimeError("stopped")

    monkeypatch.setattr(sweep_module, "train", train_recording_resume)
    sweep(data.path, tmp_path, sweep_base("tiny", steps=4), rows=["base", "D3"])
    assert asked == [("base-seed1", True), ("D3-seed1", False)]


def test_rows_that_scale_to_no_whole_size_or_probability_say_why():
    with pytest.raises(CannotScale, match=r"model\.d_k = 6 x 1/4 = 1\.5 is no size"):
        row_config(sweep_base("tiny", assignments=["model.d_k=6"]), "B1")
    with pytest.raises(CannotScale, match=r"8 heads cannot share 6"):  # A4: x4 heads of 2
        row_config(
            sweep_base("tiny", assignments=["model.h=2", "model.d_k=3", "model.d_v=3"]), "A4"
        )
    with pytest.raises(CannotScale, match=r"d_k 8 != d_v 16"):
        row_config(sweep_base("tiny", assignments=["model.d_k=8", "model.d_v=16"]), "A1")
    with pytest.raises(
        CannotScale, match=r"model\.dropout = 0\.8 \+ 0\.2 = 1\.0 is no probability"
    ):
        row_config(sweep_base("tiny", assignments=["model.dropout=0.8"]), "big")
    with pytest.raises(ConfigError, match="Table 3 has no row 'Z9'"):
        row_config(sweep_base("tiny"), "Z9")


def test_a_layer_count_rounds_to_one_layer_at_least_and_big_trains_three_times_the_minutes():
    one_layer = sweep_base("tiny", steps=4, assignments=["model.n_layers=1"])
    assert row_config(one_layer, "C1").model.n_layers == 1  # 2/6 of 1 layer
    timed = sweep_base("tiny", minutes=10)
    assert row_config(timed, "big").train.max_minutes == 30  # 300K steps against 100K
    assert row_config(timed, "A1").train.max_minutes == 10


def test_the_rows_carry_the_papers_dev_numbers():
    """Table 3's dev perplexity and BLEU (newstest2013), as the paper prints them."""
    paper = {
        "base": (4.92, 25.8), "A1": (5.29, 24.9), "A2": (5.00, 25.5), "A3": (4.91, 25.8),
        "A4": (5.01, 25.4), "B1": (5.16, 25.1), "B2": (5.01, 25.4), "C1": (6.11, 23.7),
        "C2": (5.19, 25.3), "C3": (4.88, 25.5), "C4": (5.75, 24.5), "C5": (4.66, 26.0),
        "C6": (5.12, 25.4), "C7": (4.75, 26.2), "D1": (5.77, 24.6), "D2": (4.95, 25.5),
        "D3": (4.67, 25.3), "D4": (5.47, 25.7), "E1": (4.92, 25.7), "big": (4.33, 26.4),
    }  # fmt: skip
    assert {name: (table3.row(name).ppl, table3.row(name).bleu) for name in ROW_NAMES} == paper


def test_the_params_table_says_which_rows_cannot_scale():
    one_head = sweep_base("tiny", assignments=["model.h=1", "model.d_k=2", "model.d_v=2"])
    lines = table3.params_table(one_head, vocab_size=100).splitlines()
    b1 = next(line for line in lines if line.startswith("| B1 |"))
    assert "cannot scale: model.d_k" in b1 and b1.endswith("| 58 |")  # the paper's count still


def test_a_rows_runs_are_kept_in_seed_order_when_they_end_out_of_order(
    data, tmp_path, monkeypatch, torch_threads
):
    def scripted_run(config, row, seed, data, run_dir, device):
        time.sleep(0.3 if (row, seed) == ("D3", 2) else 0.0)  # D3's seed 3 ends before its 2
        return RunResult(row, seed, dev_ppl=5.0, dev_score=30.0, parameters=1, updates=4,
                         minutes=0.1)  # fmt: skip

    monkeypatch.setattr(sweep_module, "_run", scripted_run)
    monkeypatch.setattr(sweep_module, "_workers", lambda jobs: ThreadPoolExecutor(jobs))
    results = sweep(data.path, tmp_path, sweep_base("tiny", steps=4), rows=["base", "D3"],
                    seeds=3, jobs=2)  # fmt: skip
    assert [[run.seed for run in r.runs] for r in results] == [[1, 2, 3], [1, 2, 3]]


def test_the_report_is_rewritten_after_every_run(data, tmp_path, monkeypatch):
    """A sweep stopped after its first run already reports that run."""
    tables = []

    def scripted_run(config, row, seed, data, run_dir, device):
        table = tmp_path / "table3.md"
        tables.append(table.read_text() if table.exists() else "")
        return RunResult(row, seed, dev_ppl=5.0, dev_score=30.0, parameters=1, updates=4,
                         minutes=0.1)  # fmt: skip

    monkeypatch.setattr(sweep_module, "_run", scripted_run)
    sweep(data.path, tmp_path, sweep_base("tiny", steps=4), rows=["base", "D3"])
    assert tables[0] == "" and "30.00" in tables[1].split("| base |")[1].split("\n")[0]


def test_a_folder_that_is_not_prepared_data_fails_before_any_run(tmp_path):
    with pytest.raises(ValueError, match="not a prepared dataset"):
        sweep(tmp_path / "empty", tmp_path / "out", sweep_base("tiny", steps=4), rows=["base"])
    assert not (tmp_path / "out").exists()  # no run trained, no report of failed runs


def test_more_jobs_than_cores_still_gives_each_run_one_thread_not_torchs_default(monkeypatch):
    """train.threads 0 means torch's default (every core): with 4 runs on 2 cores each run must
    get 1, not 2 // 4 = 0."""
    monkeypatch.setattr(members.os, "cpu_count", lambda: 2)
    config = preset("tiny")
    assert config.train.threads == 0
    assert sweep_module.threads_each(config, 4).train.threads == 1
    assert sweep_module.threads_each(config, 2).train.threads == 1
    assert sweep_module.threads_each(config, 1) == config


def test_set_onto_the_base_wins_over_the_sweeps_budget_and_search():
    # guards: --set overwritten by --steps/--minutes or by the task's search the sweep puts back
    asked = ["train.max_steps=7", "decode.beam_size=2", "train.valid_bleu=true"]
    base = sweep_base("tiny", minutes=5, steps=40, assignments=asked)
    assert (base.train.max_steps, base.train.max_minutes, base.train.valid_bleu) == (7, 5, True)
    assert base.decode == DecodeConfig(beam_size=2)


def test_each_run_is_scored_on_the_dev_set_as_table_3(data, tmp_path, monkeypatch):
    # guards: the sweep scoring its rows on the test set (Table 3 is newstest2013, the dev set)
    real_score, splits = sweep_module.translate_and_score, []

    def recording(translator, data, split, *args):
        splits.append(split)
        return real_score(translator, data, split, *args)

    monkeypatch.setattr(sweep_module, "translate_and_score", recording)
    base = sweep_base("tiny", steps=2, assignments=as_set_arguments(QUICK))
    (result,) = sweep(data.path, tmp_path, base, rows=["base"])
    assert "test" in data.splits and splits == ["dev"]
    assert (tmp_path / "base-seed1" / "dev.hyp").exists() and not result.runs[0].error
