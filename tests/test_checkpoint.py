"""Checkpoint files, the rotating store, crash safety and averaging (transduce/checkpoint.py)."""

from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from transduce import files
from transduce.training import checkpoint
from transduce.training.checkpoint import CheckpointError, CheckpointStore, average, load, save
from transduce.training.resume import Progress, capture_rng, restore_rng

from .conftest import killed_at_rename


def tiny_state(step: int, fill: float = 0.0) -> dict[str, Any]:
    """A tiny state in the documented layout; `fill` shifts the model weights."""
    gen = torch.Generator().manual_seed(step)
    return {
        "model": {
            "w": torch.full((2, 3), fill, dtype=torch.float32),
            "h": torch.full((3,), fill, dtype=torch.float16),
            "count": torch.tensor([7], dtype=torch.int64),
        },
        "step": step,
        "config": json.dumps({"d_model": 16}),
        "rng": {"torch": gen.get_state(), "python": random.Random(step).getstate()},
        "nested": {"a": [1, 2.5, "x", None], "b": {"c": torch.arange(4)}},
    }


def assert_same(a: Any, b: Any) -> None:
    """Bit-identical comparison through nested dicts, lists and tuples."""
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def test_round_trip_is_bit_identical(tmp_path: Path) -> None:
    state = tiny_state(3, fill=0.1)
    save(state, tmp_path / "c.pt")
    loaded = load(tmp_path / "c.pt")
    assert_same(loaded, state)
    # the restored RNG state continues the same stream
    gen = torch.Generator()
    gen.set_state(loaded["rng"]["torch"])
    ref = torch.Generator().manual_seed(3)
    assert torch.equal(torch.rand(5, generator=gen), torch.rand(5, generator=ref))


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"nope\.pt.*no such"):
        load(tmp_path / "nope.pt")


def test_truncated_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    save(tiny_state(1), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 10])
    with pytest.raises(CheckpointError, match=r"c\.pt.*truncated"):
        load(path)


def test_flipped_payload_byte_fails_checksum(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    save(tiny_state(1), path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # past the ~100-byte header, inside the payload
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"c\.pt.*checksum"):
        load(path)


def test_foreign_file_is_rejected(tmp_path: Path) -> None:
    plain = tmp_path / "plain.pt"
    torch.save({"model": {}}, plain)  # a torch file, but not one of ours
    with pytest.raises(CheckpointError, match=r"plain\.pt.*not a transduce checkpoint"):
        load(plain)
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(CheckpointError, match=r"notes\.txt.*not a transduce checkpoint"):
        load(tmp_path / "notes.txt")


def test_a_newer_format_or_a_state_that_is_no_dict_is_refused_by_name(tmp_path: Path) -> None:
    """A file of a later format version is refused before its payload is read, and a valid file
    holding something else than a state dict is not handed to the loop as a state."""
    save(tiny_state(1), tmp_path / "c.pt")
    data = (tmp_path / "c.pt").read_bytes()
    (tmp_path / "v2.pt").write_bytes(data.replace(b"TRANSDUCE-CKPT 1 ", b"TRANSDUCE-CKPT 2 ", 1))
    with pytest.raises(CheckpointError, match=r"v2\.pt.*format version 2, expected 1"):
        load(tmp_path / "v2.pt")
    save([torch.zeros(2)], tmp_path / "list.pt")  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match=r"list\.pt.*state is a list, expected a dict"):
        load(tmp_path / "list.pt")


def test_weights_only_refuses_arbitrary_objects(tmp_path: Path) -> None:
    save({"obj": Path("x")}, tmp_path / "c.pt")
    with pytest.raises(CheckpointError, match=r"c\.pt.*weights_only"):
        load(tmp_path / "c.pt")


def test_rotation_keeps_last_k_plus_best(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep_last=2)
    scores = {10: 0.5, 20: 0.9, 30: 0.4, 40: 0.3, 50: 0.2}
    for step, score in scores.items():
        store.save(tiny_state(step), step, score)
    assert store.steps() == [20, 40, 50]
    assert sorted(p.name for p in store.dir.glob("step_*.pt")) == [
        "step_00000020.pt",
        "step_00000040.pt",
        "step_00000050.pt",
    ]
    index = json.loads(store.index_path.read_text())
    assert [e["step"] for e in index["steps"]] == [20, 40, 50]
    assert [e["best"] for e in index["steps"]] == [True, False, False]
    assert index["best"]["step"] == 20 and index["best"]["score"] == 0.9
    assert store.last_paths(2) == [store.path(40), store.path(50)]


@pytest.mark.parametrize(("higher", "best_step"), [(True, 20), (False, 30)])
def test_best_tracks_score_in_both_directions(tmp_path: Path, higher: bool, best_step: int) -> None:
    store = CheckpointStore(tmp_path, keep_last=1)
    for step, score in [(10, 0.5), (20, 0.9), (30, 0.1), (40, None), (50, 0.6)]:
        store.save(tiny_state(step), step, score, higher_is_better=higher)
    assert load(store.best_path())["step"] == best_step
    assert not store.best_path().is_symlink()
    assert store.steps() == sorted({best_step, 50})


def test_best_survives_reopening_the_store(tmp_path: Path) -> None:
    CheckpointStore(tmp_path, keep_last=1).save(tiny_state(10), 10, 0.9)
    store = CheckpointStore(tmp_path, keep_last=1)
    store.save(tiny_state(20), 20, 0.5)  # worse than the 0.9 recorded before the restart
    assert load(store.best_path())["step"] == 10
    assert store.steps() == [10, 20]


def test_load_latest_falls_back_past_corrupt_newest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(tmp_path, keep_last=3)
    assert store.load_latest() is None
    for step in (10, 20, 30):
        store.save(tiny_state(step), step, None)
    newest = store.path(30)
    newest.write_bytes(newest.read_bytes()[:50])
    with caplog.at_level(logging.WARNING, logger="transduce.training.checkpoint"):
        state = store.load_latest()
    assert state is not None and state["step"] == 20
    assert "step_00000030.pt" in caplog.text


def test_a_stopped_runs_state_is_resumed_from_until_a_step_file_supersedes_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Outside the rotation and the best, one at a time, newest first on resume, gone with the
    next step file; a corrupt one falls back to the step files."""
    store = CheckpointStore(tmp_path, keep_last=1)
    store.save(tiny_state(10), 10, 1.0)
    store.save_stopped(tiny_state(13), 13)
    store.save_stopped(tiny_state(17), 17)  # stopped again after resuming from 13
    assert store.stopped_steps() == [17] and store.steps() == [10]
    assert load(store.best_path())["step"] == 10
    assert store.newest_paths() == [store.stopped_path(17), store.path(10)]
    assert store.load_latest()["step"] == 17
    assert checkpoint.default_checkpoint(tmp_path) == store.stopped_path(17)
    store.stopped_path(17).write_bytes(store.stopped_path(17).read_bytes()[:50])
    with caplog.at_level(logging.WARNING, logger="transduce.training.checkpoint"):
        assert store.load_latest()["step"] == 10
    assert "stopped_00000017.pt" in caplog.text
    store.save(tiny_state(20), 20, None)
    assert store.stopped_steps() == [] and store.steps() == [10, 20]  # 10: the best


def test_leftover_temp_file_is_ignored(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep_last=2)
    store.save(tiny_state(10), 10, 0.1)
    # what a kill between mkstemp and os.replace leaves behind
    leftover = store.dir / ".step_00000020.pt.k1ll3d.tmp"
    leftover.write_bytes(b"TRANSDUCE-CKPT 1 999 abc\npartial")
    assert store.steps() == [10]
    state = store.load_latest()
    assert state is not None and state["step"] == 10
    store.save(tiny_state(20), 20, 0.2)
    assert store.steps() == [10, 20]
    assert load(store.best_path())["step"] == 20
    # nor is a file whose name only starts like a step file's (a backup, a copy being made)
    (store.dir / "step_00000030.pt.bak").write_bytes(b"")
    (store.dir / "old_step_00000040.pt").write_bytes(b"")
    assert store.steps() == [10, 20]


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_kill_during_save_keeps_previous_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    """os.replace calls in a best-improving save: 1 step file, 2 best.pt, 3 index."""
    store = CheckpointStore(tmp_path, keep_last=1)
    store.save(tiny_state(10), 10, 0.5)
    index_before = store.index_path.read_bytes()
    best_before = store.best_path().read_bytes()
    monkeypatch.setattr(files.os, "replace", killed_at_rename(fail_at))
    with pytest.raises(KeyboardInterrupt):
        store.save(tiny_state(20), 20, 0.9)
    monkeypatch.undo()

    assert store.index_path.read_bytes() == index_before
    assert load(store.path(10))["step"] == 10  # rotation never ran
    if fail_at <= 2:
        assert store.best_path().read_bytes() == best_before
    # every file the index names is complete, and no temp file was left
    for entry in json.loads(store.index_path.read_text())["steps"]:
        load(store.dir / entry["file"])
    assert not list(store.dir.glob(".*.tmp"))
    # a resumed run carries on from here
    state = CheckpointStore(tmp_path, keep_last=1).load_latest()
    assert state is not None and state["step"] == (10 if fail_at == 1 else 20)


def test_resume_from_older_step_drops_abandoned_newer_files(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep_last=1)
    store.save(tiny_state(10), 10, None)
    store.save(tiny_state(20), 20, None)
    # step 20 was corrupt, so the run resumed from 10 and now saves 15
    store.save(tiny_state(15), 15, None)
    assert store.steps() == [15]
    state = store.load_latest()
    assert state is not None and state["step"] == 15


def test_average_of_three_is_the_mean_and_keeps_dtypes(tmp_path: Path) -> None:
    paths = []
    for step, fill in [(10, 1.0), (20, 2.0), (30, 4.5)]:
        paths.append(tmp_path / f"{step}.pt")
        save(tiny_state(step, fill), paths[-1])
    avg = average(paths)
    model = avg["model"]
    assert model["w"].dtype == torch.float32 and model["h"].dtype == torch.float16
    assert torch.equal(model["w"], torch.full((2, 3), 2.5))  # (1 + 2 + 4.5) / 3
    assert torch.equal(model["h"], torch.full((3,), 2.5, dtype=torch.float16))
    assert torch.equal(model["count"], torch.tensor([7]))
    assert avg["step"] == 30
    assert_same(avg["rng"], tiny_state(30)["rng"])
    assert avg["averaged_from"] == [str(p) for p in paths]


def test_the_average_of_one_checkpoint_is_that_checkpoints_model(tmp_path: Path) -> None:
    # average_last=1 (the demo's final model): the weights come back bit for bit, in their dtypes
    state = tiny_state(10, fill=0.1)
    save(state, tmp_path / "10.pt")
    assert_same(average([tmp_path / "10.pt"])["model"], state["model"])


def test_average_accumulates_in_float64(tmp_path: Path) -> None:
    # float32 accumulation of 1 + 2^-24 + 2^-24 loses both small terms; float64 does not
    values = [1.0, 2.0**-24, 2.0**-24]
    paths = []
    for i, v in enumerate(values):
        paths.append(tmp_path / f"{i}.pt")
        save({"model": {"w": torch.tensor([v], dtype=torch.float32)}, "step": i}, paths[-1])
    expected = torch.tensor([sum(values) / 3], dtype=torch.float64).to(torch.float32)
    assert torch.equal(average(paths)["model"]["w"], expected)


def test_average_mismatched_shape_names_key_and_files(tmp_path: Path) -> None:
    good, bad = tiny_state(10), tiny_state(20)
    bad["model"]["w"] = torch.zeros(3, 2)
    save(good, tmp_path / "a.pt")
    save(bad, tmp_path / "b.pt")
    with pytest.raises(CheckpointError, match=r"a\.pt vs .*b\.pt: 'w' shape"):
        average([tmp_path / "a.pt", tmp_path / "b.pt"])


def test_average_rejects_different_integer_buffers_and_keys(tmp_path: Path) -> None:
    other = tiny_state(20)
    other["model"]["count"] = torch.tensor([8])
    save(tiny_state(10), tmp_path / "a.pt")
    save(other, tmp_path / "b.pt")
    with pytest.raises(CheckpointError, match=r"b\.pt: integer buffer 'count' differs"):
        average([tmp_path / "a.pt", tmp_path / "b.pt"])
    del other["model"]["count"]
    save(other, tmp_path / "b.pt")
    with pytest.raises(CheckpointError, match=r"b\.pt: model keys differ: \['count'\]"):
        average([tmp_path / "a.pt", tmp_path / "b.pt"])


def test_a_finished_runs_model_is_its_average_and_an_unfinished_ones_its_newest_step(
    tmp_path: Path,
) -> None:
    store = CheckpointStore(tmp_path, keep_last=3)
    for step in (10, 20):
        store.save(tiny_state(step), step, None)
    assert checkpoint.default_checkpoint(tmp_path) == store.path(20)
    save(average([store.path(10), store.path(20)]), tmp_path / checkpoint.AVERAGE_FILE)
    assert checkpoint.default_checkpoint(tmp_path) == tmp_path / checkpoint.AVERAGE_FILE


def test_the_random_state_comes_back_as_captured_for_each_process():
    captured = [capture_rng(), None]
    first = (torch.rand(3), random.random())
    captured[1] = capture_rng()
    second = (torch.rand(3), random.random())
    restore_rng(captured, rank=1)  # a list holds one state per process: this one's
    torch.testing.assert_close(torch.rand(3), second[0])
    assert random.random() == second[1]
    restore_rng(captured[0], rank=1)  # one state, from a single process
    torch.testing.assert_close(torch.rand(3), first[0])
    assert random.random() == first[1]


def test_progress_keeps_the_processes_it_was_saved_with_and_older_checkpoints_had_one():
    assert Progress.from_state({"step": 30, "world": 2}).world == 2
    assert Progress.from_state({"step": 30, "epoch": 1}) == Progress(step=30, epoch=1, world=1)


def test_at_a_tie_the_stopped_file_comes_before_the_step_file_of_its_step(tmp_path: Path):
    """newest_paths: newest step first; a stopped file and a step file of one step, the stopped
    one first (its docstring: it is the later state)."""
    store = CheckpointStore(tmp_path, keep_last=3)
    store.save(tiny_state(10), 10, None)
    store.save(tiny_state(20), 20, None)
    store.save_stopped(tiny_state(20, fill=1.0), 20)
    assert store.newest_paths() == [store.stopped_path(20), store.path(20), store.path(10)]
    assert float(store.load_latest()["model"]["w"][0, 0]) == 1.0


def test_an_equal_score_leaves_the_best_where_it_was(tmp_path: Path):
    """Only a strictly better score moves best.pt: a later checkpoint that merely equals it
    (same dev BLEU, same dev loss) does not, in either direction."""
    for higher in (True, False):
        store = CheckpointStore(tmp_path / str(higher), keep_last=1)
        store.save(tiny_state(10), 10, 5.0, higher_is_better=higher)
        store.save(tiny_state(20), 20, 5.0, higher_is_better=higher)
        assert load(store.best_path())["step"] == 10
        assert store.steps() == [10, 20]  # the best's step file is kept beside the last one


@pytest.mark.parametrize("fail_at", [2, 3])
def test_the_runs_writer_takes_a_step_file_a_kill_left_out_of_the_index_back_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    """Killed after the step file of a new best, before best.pt (2) or the index (3): the
    index still names the old best, and rotation would delete the new one. `recover` reads
    the score the step file holds, makes it the best and indexes it; and it deletes what the
    killed write left."""
    store = CheckpointStore(tmp_path, keep_last=1)
    store.save(tiny_state(10), 10, 0.5)
    calls, real_replace = [], os.replace

    def dying_replace(src: Any, dst: Any) -> None:
        calls.append(dst)
        if len(calls) == fail_at:
            Path(src).rename(Path(src).with_name(".best.pt.k1ll3d.tmp"))  # left, as by a kill
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", dying_replace)
    with pytest.raises(KeyboardInterrupt):
        store.save(tiny_state(20, fill=1.0), 20, 0.9)
    monkeypatch.undo()
    assert json.loads(store.index_path.read_text())["best"]["step"] == 10  # the kill's state

    reopened = CheckpointStore(tmp_path, keep_last=1)
    reopened.recover()
    index = json.loads(store.index_path.read_text())
    assert index["best"] == {"step": 20, "score": 0.9, "higher_is_better": True}
    assert [(e["step"], e["score"]) for e in index["steps"]] == [(10, 0.5), (20, 0.9)]
    assert_same(load(store.best_path())["model"], tiny_state(20, fill=1.0)["model"])
    assert not list(store.dir.glob(".*.tmp"))
    (store.dir / "notes.tmp").write_text("mine")  # not a name our writes leave
    CheckpointStore(tmp_path, keep_last=1).recover()
    assert (store.dir / "notes.tmp").exists()
    reopened.save(tiny_state(30), 30, 0.7)  # rotation keeps the best it now knows
    assert reopened.steps() == [20, 30]


def test_recover_leaves_a_consistent_store_alone_and_a_worse_missing_step_out_of_best(
    tmp_path: Path,
) -> None:
    store = CheckpointStore(tmp_path, keep_last=3)
    store.save(tiny_state(10), 10, 0.5)
    index = store.index_path.read_bytes()
    CheckpointStore(tmp_path, keep_last=3).recover()
    assert store.index_path.read_bytes() == index  # nothing missing: nothing rewritten
    save(tiny_state(20) | {"validation": {"score": 0.1, "higher": True}}, store.path(20))
    CheckpointStore(tmp_path, keep_last=3).recover()
    recovered = json.loads(store.index_path.read_text())
    assert recovered["best"]["step"] == 10
    assert [(e["step"], e["score"]) for e in recovered["steps"]] == [(10, 0.5), (20, 0.1)]
    assert load(store.best_path())["step"] == 10


def test_a_model_path_that_is_missing_or_a_dataset_is_named_as_such(tmp_path: Path) -> None:
    """`load("runs/typo")` said "no checkpoint found (has training started?)"."""
    with pytest.raises(FileNotFoundError, match="no such run folder or checkpoint file"):
        checkpoint.default_checkpoint(tmp_path / "typo")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "meta.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="a prepared dataset, not a run folder"):
        checkpoint.default_checkpoint(tmp_path / "data")
    (tmp_path / "run").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no checkpoint found \(has training started\?\)"):
        checkpoint.default_checkpoint(tmp_path / "run")
