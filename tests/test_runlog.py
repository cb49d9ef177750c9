import json
import time
from types import SimpleNamespace

import pytest

from transduce import files
from transduce.config import Config, override
from transduce.tasks.translation import scoring
from transduce.training.runlog import (
    WRITE_PROBE,
    RunFolderError,
    Window,
    check_same_run,
    check_writable,
    claim_run_folder,
    keep_log_until,
    plot_learning_curve,
    read_log,
    write_run_folder,
)

from .conftest import killed_at_rename


def test_a_last_line_torn_by_a_kill_is_dropped(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    assert read_log(log) == [{"step": 1}, {"step": 2}]


def test_blank_lines_in_a_log_are_skipped(tmp_path):
    """A log opened and saved by an editor may gain empty lines: they are no records."""
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1}\n\n  \n{"step": 2}\n\n')
    assert read_log(log) == [{"step": 1}, {"step": 2}]


def test_a_broken_line_inside_the_log_is_an_error_naming_it(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1}\nnonsense\n{"step": 3}\n')
    with pytest.raises(RunFolderError, match=r"log\.jsonl line 2"):
        read_log(log)


def test_keep_log_until_forgets_later_records(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"step": s}) + "\n" for s in (5, 10, 15)))
    keep_log_until(log, 10)
    assert [r["step"] for r in read_log(log)] == [5, 10]
    keep_log_until(log, 0)
    assert read_log(log) == []


def test_window_averages_loss_per_token():
    window = Window()
    window.add(loss=2.0, nll=1.0, tgt_tokens=10)
    window.add(loss=4.0, nll=3.0, tgt_tokens=30)
    summary = window.summary()
    assert summary["loss"] == pytest.approx(3.5) and summary["nll"] == pytest.approx(2.5)
    assert summary["updates"] == 2


def test_the_log_is_mirrored_to_tensorboard_and_a_resume_hides_what_it_redoes(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from transduce.training.runlog import RunLog

    log = RunLog(tmp_path)
    for step in range(1, 6):
        log.write({"kind": "train", "step": step, "loss": 10.0 - step, "lr": 1e-3})
    log.write({"kind": "valid", "step": 5, "loss": 4.5, "bleu": 12.5})
    log.close()
    # A resumed session is a later process: its event file's name (seconds, then a counter)
    # sorts after the first. Within one second and one long-lived process the counter's
    # digits could sort it first, so wait past the second as a real resume does.
    time.sleep(1.05)
    resumed = RunLog(tmp_path, resumed_at=4)  # the checkpoint was at step 3: 4 and 5 are redone
    resumed.write({"kind": "train", "step": 4, "loss": 0.5, "lr": 1e-3})
    resumed.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert {"train/loss", "train/lr", "valid/loss", "valid/bleu"} <= set(events.Tags()["scalars"])
    losses = {e.step: e.value for e in events.Scalars("train/loss")}
    assert losses == {1: 9.0, 2: 8.0, 3: 7.0, 4: 0.5}
    assert len(read_log(tmp_path / "log.jsonl")) == 7  # the JSON log is written as before


def test_a_new_run_refuses_a_folder_of_the_users_own_files(tmp_path):
    """Training writes config.json and log.jsonl into --out: a folder holding other files, or a
    config.json that is not a run's, is refused before anything in it is overwritten."""
    thesis = tmp_path / "mine"
    thesis.mkdir()
    (thesis / "thesis.tex").write_text("years of work")
    with pytest.raises(RunFolderError, match=r"not a run's \(thesis\.tex\)"):
        check_same_run(thesis, Config(), resume=False)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "config.json").write_text('{"editor": "vim"}')
    (notes / "log.jsonl").write_text("my diary\n")
    for resume in (False, True):
        with pytest.raises(RunFolderError, match=r"config\.json: not a run's config\.json"):
            check_same_run(notes, Config(), resume=resume)
    assert (thesis / "thesis.tex").read_text() == "years of work"
    assert (notes / "log.jsonl").read_text() == "my diary\n"


def test_the_write_check_leaves_another_starts_probe_alone(tmp_path):
    """Two runs starting at once (into two folders, or one refused by the other's hold) each
    probe the folder under a name of its own: neither deletes the other's probe mid-check."""
    theirs = tmp_path / WRITE_PROBE  # the one name every start used before
    theirs.write_bytes(b"another start's")
    check_writable(tmp_path)
    check_writable(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [WRITE_PROBE]
    assert theirs.read_bytes() == b"another start's"


def test_a_new_run_takes_over_a_start_that_failed_before_its_first_checkpoint(tmp_path):
    """What a run writes before its first checkpoint, and a new or missing folder, are fine."""
    started = tmp_path / "started"
    started.mkdir()
    (started / "config.json").write_text(Config().to_json())
    for name in ("data.json", "log.jsonl", "vocab.model", ".write-testk3x9_q"):  # a killed probe
        (started / name).write_text("{}")
    (started / "tensorboard").mkdir()
    for folder in (started, tmp_path / "empty", tmp_path / "absent"):
        (tmp_path / "empty").mkdir(exist_ok=True)
        check_same_run(folder, Config(), resume=False)


def test_a_refused_resume_names_every_setting_that_changed(tmp_path):
    """The message lists each change by its --set name, not only the first one found."""
    (tmp_path / "config.json").write_text(Config().to_json())
    changed = override(Config(), {"model.d_ff": 96, "train.warmup_steps": 99})
    with pytest.raises(RunFolderError) as refused:
        check_same_run(tmp_path, changed, resume=True)
    message = str(refused.value)
    assert "model.d_ff" in message and "-> 96" in message
    assert "train.warmup_steps" in message and "-> 99" in message


def test_a_run_written_before_runs_recorded_their_task_resumes_with_its_datas_task(tmp_path):
    """A config.json without a task section (version 0.1) takes the task of the data it is
    resumed on: tokenized data's lowercased BLEU is no change of configuration."""
    tokenized = Config(task=scoring(True))
    assert tokenized.task != Config().task  # the case where the default would differ
    legacy = json.loads(tokenized.to_json())
    del legacy["task"]
    (tmp_path / "config.json").write_text(json.dumps(legacy))
    check_same_run(tmp_path, tokenized, resume=True)
    # a config.json that records its task still holds the resume to it
    (tmp_path / "config.json").write_text(Config().to_json())
    with pytest.raises(RunFolderError, match=r"task\.lowercase False -> True"):
        check_same_run(tmp_path, tokenized, resume=True)


def test_a_kill_while_a_resume_rewrites_the_run_files_leaves_each_whole(tmp_path, monkeypatch):
    """A resume rewrites config.json, vocab.model and data.json and trims the log: a kill at
    any of those writes leaves every file whole (a truncated config.json made the run
    impossible to resume, a truncated log lost its history), and the next start deletes the
    temporary files a killed write leaves."""
    data = SimpleNamespace(path=tmp_path / "data", meta={"vocab_size": 8})
    data.path.mkdir()
    (data.path / "vocab.model").write_bytes(b"the sentencepiece model")
    run, names = tmp_path / "run", ("config.json", "vocab.model", "data.json", "log.jsonl")
    write_run_folder(run, Config(), data, resume=False)
    (run / "log.jsonl").write_text('{"kind": "train", "step": 1}\n{"kind": "train", "step": 2}\n')
    before = {name: (run / name).read_bytes() for name in names}
    for kill_at in range(1, 5):
        monkeypatch.setattr(files.os, "replace", killed_at_rename(kill_at))
        with pytest.raises(KeyboardInterrupt):
            write_run_folder(run, Config(), data, resume=True)
            keep_log_until(run / "log.jsonl", 2)
        monkeypatch.undo()
        assert {name: (run / name).read_bytes() for name in names} == before, kill_at
    (run / ".config.json.k1ll3d.tmp").write_text("{")
    write_run_folder(run, Config(), data, resume=True)
    assert sorted(p.name for p in run.iterdir()) == sorted(names)


def test_the_run_files_are_made_as_open_makes_them_not_private(tmp_path):
    """Written through a temporary file (mkstemp's 0600), the run's files are still readable by
    whoever the umask lets read them: another account's TensorBoard, server or colleague."""
    data = SimpleNamespace(path=tmp_path / "data", meta={})
    data.path.mkdir()
    (data.path / "vocab.model").write_bytes(b"spm")
    (tmp_path / "plain").write_text("as open makes it")
    write_run_folder(tmp_path / "run", Config(), data, resume=False)
    expected = (tmp_path / "plain").stat().st_mode & 0o777
    for name in ("config.json", "vocab.model", "data.json", "log.jsonl"):
        assert (tmp_path / "run" / name).stat().st_mode & 0o777 == expected, name


def test_a_folder_on_a_filesystem_without_locks_is_still_trained_into_and_that_is_said(
    tmp_path, monkeypatch, caplog
):
    """Some network mounts refuse flock: a run there goes on, without the second-writer check."""
    import errno

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(files.fcntl, "flock", no_locks)
    claim = claim_run_folder(tmp_path / "run")
    assert "cannot be locked" in caplog.text and "second writer" in caplog.text
    claim.release()
    claim.release()  # twice is harmless


def test_a_turn_whose_lock_cannot_be_made_or_taken_goes_on_unguarded_and_says_so(
    tmp_path, monkeypatch, caplog
):
    """`prepare` into a folder beside which nothing can be written, or on a mount without locks,
    still runs (its own writes fail with their own message where they must)."""
    import errno

    done = []
    with files.waiting_turn(tmp_path / "missing" / ".data.lock", "prepare of data"):
        done.append("without the file")

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(files.fcntl, "flock", no_locks)
    with files.waiting_turn(tmp_path / ".data.lock", "prepare of data"):
        done.append("without the lock")
    assert done == ["without the file", "without the lock"]
    assert not (tmp_path / ".data.lock").exists()  # no leftover beside the data
    assert caplog.text.count("cannot be made or locked") == 2
    assert caplog.text.count("a second prepare of data is not kept out") == 2
    assert "No such file" in caplog.text and "No locks available" in caplog.text


def test_a_turn_waited_for_on_a_lock_file_its_holder_deleted_waits_for_the_new_holder(tmp_path):
    """A holder deletes the lock file as its turn ends; a third process may have made and locked
    a new one before the waiter wakes on the deleted file. The waiter must see that the name no
    longer points at its file, and wait for the new holder: two turns at once otherwise."""
    import fcntl
    import os
    import threading

    lock = tmp_path / ".data.lock"
    first = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(first, fcntl.LOCK_EX)
    inside, leave = threading.Event(), threading.Event()

    def waiter():
        with files.waiting_turn(lock, "prepare of data"):
            inside.set()
            leave.wait(30)

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.2)  # the waiter opens the first file and blocks on it
    lock.unlink()
    third = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(third, fcntl.LOCK_EX)
    os.close(first)  # the first's turn ends
    assert not inside.wait(0.5), "the waiter took its turn while the third held the lock file"
    lock.unlink()
    os.close(third)
    assert inside.wait(30)
    leave.set()
    thread.join(30)
    assert not lock.exists()


@pytest.mark.parametrize(
    ("late", "last", "rate", "line"),
    [(3, 6, 0.1, 4), (3, 3, 0.1, None), (0, 6, 0.1, None), (3, 6, 0.0, None)],
)
def test_the_curve_marks_the_update_late_dropout_began_at_where_the_run_got_there(
    tmp_path, monkeypatch, late, last, rate, line
):
    """The training loss steps up where dropout begins: the curve says why, and only then (a
    model without dropout has nothing to begin)."""
    import matplotlib.axes

    lines = []
    monkeypatch.setattr(matplotlib.axes.Axes, "axvline", lambda self, x, **kw: lines.append(x))
    (tmp_path / "config.json").write_text(
        override(Config(), {"train.late_dropout": late, "model.dropout": rate}).to_json()
    )
    log = tmp_path / "log.jsonl"
    records = [{"kind": "train", "step": s, "loss": 5.0 - s / 10} for s in range(1, last + 1)]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    plot_learning_curve(log, tmp_path / "curve.png")
    assert lines == ([line] if line else [])
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
