"""`train --members K`: an ensemble trained in one command, whose folder decodes as one model."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
import torch

from tests.conftest import (
    PLUMBING_MODEL,
    as_set_arguments,
    prepared_reverse_task,
    wait_for,
)
from transduce.cli import main
from transduce.config import override, parse_assignments
from transduce.decoding.channel import channel_rerank
from transduce.decoding.translate import Translator
from transduce.models.ensemble import Ensemble
from transduce.models.saved import load_vocab, model_paths
from transduce.presets import tiny
from transduce.serve.engine import Engine
from transduce.training import members
from transduce.training.checkpoint import AVERAGE_FILE, CheckpointStore, default_checkpoint, load
from transduce.training.runlog import RunFolderError

TOY = as_set_arguments(
    PLUMBING_MODEL
    | {"train.warmup_steps": 10, "train.log_every": 2, "train.valid_bleu": "false"}
    | {"train.keep_last": 2, "train.average_last": 2}
)


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory) -> Path:
    return prepared_reverse_task(tmp_path_factory.mktemp("members"), n_train=400, n_dev=6)


@pytest.fixture(scope="module")
def pair(toy_data, tmp_path_factory) -> Path:
    """Two members trained by one `transduce train --members 2`, seeds 5 and 6."""
    out = tmp_path_factory.mktemp("pair") / "pair"
    settings = [*TOY, "train.max_steps=12", "train.valid_every=6", "train.seed=5"]
    main(["-q", "train", "--data", str(toy_data), "--preset", "tiny", "--out", str(out),
          "--members", "2", "--device", "cpu", "--set", *settings])  # fmt: skip
    return out


def test_each_member_trains_to_the_end_with_its_own_seed_and_share_of_the_cores(pair):
    assert json.loads((pair / members.MEMBERS_FILE).read_text()) == {
        "members": ["member1", "member2"]
    }
    configs = [json.loads((pair / m / "config.json").read_text()) for m in ("member1", "member2")]
    assert [c["train"]["seed"] for c in configs] == [5, 6]
    share = max(1, (os.cpu_count() or 1) // 2)
    assert [c["train"]["threads"] for c in configs] == [share, share]
    for member in ("member1", "member2"):
        assert (pair / member / AVERAGE_FILE).exists()
        assert CheckpointStore(pair / member, 2).steps()[-1] == 12
    first, second = (load(pair / m / AVERAGE_FILE)["model"] for m in ("member1", "member2"))
    assert any(not torch.equal(first[name], second[name]) for name in first)  # two models


def test_the_folder_decodes_as_the_ensemble_of_its_members(pair, toy_data, tmp_path):
    assert model_paths(pair) == [pair / "member1", pair / "member2"]
    assert model_paths([pair, "other"]) == [pair / "member1", pair / "member2", Path("other")]
    whole = Translator.load(pair, device="cpu")
    named = Translator.load([pair / "member1", pair / "member2"], device="cpu")
    assert isinstance(whole.model, Ensemble) and len(whole.model.members) == 2
    lines = (toy_data / "dev.src.txt").read_text().splitlines()
    assert whole.translate(lines) == named.translate(lines)
    output = tmp_path / "dev.hyp"
    main(["-q", "translate", "--model", str(pair), "--input", str(toy_data / "dev.src.txt"),
          "--output", str(output), "--device", "cpu"])  # fmt: skip
    assert output.read_text().splitlines() == [best[0][0] for best in named.translate(lines)]


def test_a_folder_as_the_noisy_channel_is_the_ensemble_of_its_members(pair, toy_data, tmp_path):
    """`translate --channel OUT`: the reverse model that re-ranks is the members' ensemble."""
    forward = Translator.load(pair / "member1", device="cpu")
    lines = (toy_data / "dev.src.txt").read_text().splitlines()
    named = Translator.load([pair / "member1", pair / "member2"], device="cpu")
    expected = [ranked[0][0] for ranked in channel_rerank(forward, named, lines, weight=5.0)]
    output = tmp_path / "dev.hyp"
    main(["-q", "translate", "--model", str(pair / "member1"), "--channel", str(pair),
          "--channel-weight", "5", "--input", str(toy_data / "dev.src.txt"),
          "--output", str(output), "--device", "cpu"])  # fmt: skip
    assert output.read_text().splitlines() == expected


def test_a_server_names_the_ensemble_by_its_folder(pair):
    for given in (pair, [pair], str(pair)):
        engine = Engine.load(given, device="cpu")
        assert engine.name == "pair"
        assert engine.members == ["pair/member1", "pair/member2"]


def test_what_takes_one_model_names_a_member_and_the_vocabulary_is_theirs(pair, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"an ensemble of 2 models .* such as .*member1"):
        default_checkpoint(pair)
    with pytest.raises(SystemExit, match=r"export: error: .*an ensemble of 2 models"):
        main(["export", "--model", str(pair), "--to", "hf", "--out", str(tmp_path / "hf")])
    assert load_vocab(pair).size == load_vocab(pair / "member1").size
    assert load_vocab(pair).encode(["a b c"]) == load_vocab(pair / "member1").encode(["a b c"])


def test_a_folder_is_refused_before_anything_trains_when_it_holds_another_run(pair, toy_data):
    config = tiny()
    with pytest.raises(RunFolderError, match="already holds an ensemble: pass --resume"):
        members.train_members(config, toy_data, pair, 2)
    with pytest.raises(RunFolderError, match=r"ensemble of 2 models, not 3: .*--members 2"):
        members.train_members(config, toy_data, pair, 3, resume=True)
    with pytest.raises(RunFolderError, match="one model's run: name a new --out"):
        members.train_members(config, toy_data, pair / "member1", 2)
    with pytest.raises(ValueError, match="at least 2 members, not 1"):
        members.train_members(config, toy_data, pair / "new", 1)
    with pytest.raises(ValueError, match="not a prepared dataset"):
        members.train_members(config, pair, pair / "new", 2)
    assert not (pair / "new").exists()


@pytest.mark.parametrize(
    "listed, said",
    [("{not json", "not a list of an ensemble's members"), ('{"members": "member1"}', "must name"),
     ('{"members": ["member1", ""]}', "must name"), ("[]", "not a list")],
)  # fmt: skip
def test_a_damaged_list_of_members_is_named_not_a_traceback(tmp_path, listed, said):
    (tmp_path / members.MEMBERS_FILE).write_text(listed)
    with pytest.raises(ValueError, match=said):
        model_paths(tmp_path)
    with pytest.raises(SystemExit, match=f"translate: error: .*members.json: .*{said}"):
        main(["translate", "--model", str(tmp_path), "--input", "-"])


def test_members_are_not_trained_under_torchrun(monkeypatch, toy_data, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="not under torchrun"):
        members.train_members(tiny(), toy_data, tmp_path / "out", 2)


def test_members_count_their_seeds_on_and_keep_threads_a_user_set(monkeypatch):
    monkeypatch.setattr(members.os, "cpu_count", lambda: 8)
    config = override(tiny(), parse_assignments(["train.seed=7"]))
    assert [members.member_config(config, k, 3).train.seed for k in (1, 2, 3)] == [7, 8, 9]
    assert members.member_config(config, 2, 3).train.threads == 2  # 8 cores // 3
    fixed = override(config, parse_assignments(["train.threads=3"]))
    assert members.member_config(fixed, 2, 4).train.threads == 3


@pytest.mark.slow
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_command_stops_each_member_once_saved_and_resume_ends_them(
    toy_data, tmp_path, number
):
    """Ctrl-C (SIGINT to the terminal's process group, which the members have left) or a
    scheduler's SIGTERM to the command goes on once to each member: each saves after its update
    and stops (twice would stop it at once, unsaved), the command says so, and --resume trains
    both to the end."""
    out = tmp_path / "run"
    command = _members_command(toy_data, out, "train.max_steps=100000")
    with _training(command, out, start_new_session=True) as run:
        if number == signal.SIGINT:
            os.killpg(run.process.pid, number)  # as a terminal's Ctrl-C: the whole foreground group
        else:
            os.kill(run.process.pid, number)
        stderr = run.stderr(timeout=120)
    assert run.process.returncode != 0, stderr
    assert "member1, member2 of" in stderr and "saved and stopped; --resume continues" in stderr
    steps = []
    for member in ("member1", "member2"):
        assert stderr.count(f"{member} {number.name} at step") == 1, stderr  # once, not twice
        store = CheckpointStore(out / member, 2)
        steps.append(max(store.stopped_steps() + store.steps()))
    again = subprocess.run(
        [*command[:-1], f"train.max_steps={max(steps) + 4}", "--resume"],
        stderr=subprocess.PIPE, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert all((out / m / AVERAGE_FILE).exists() for m in ("member1", "member2"))


@pytest.mark.slow
def test_members_whose_command_is_killed_save_and_stop(toy_data, tmp_path):
    """A kill -9 of the command leaves no member training on alone: each saves and stops."""
    out = tmp_path / "run"
    with _training(_members_command(toy_data, out, "train.max_steps=100000"), out) as run:
        run.process.kill()
        stderr = run.stderr(timeout=60)
    for member in ("member1", "member2"):
        assert re.search(rf"{member} SIGTERM at step \d+: saved", stderr), stderr


def test_a_member_that_fails_is_named_and_the_other_ends_its_run(toy_data, tmp_path):
    """member2's folder holds a run of other settings: it fails, member1 trains to its end."""
    out = tmp_path / "run"
    settings = [*TOY, "train.max_steps=6", "train.valid_every=3"]
    main(["-q", "train", "--data", str(toy_data), "--preset", "tiny", "--out", str(out / "member2"),
          "--device", "cpu", "--set", *settings, "model.d_ff=48"])  # fmt: skip
    (out / members.MEMBERS_FILE).write_text(json.dumps({"members": ["member1", "member2"]}))
    with pytest.raises(SystemExit, match=r"member2 of .* failed .*--resume trains every member"):
        main(["-q", "train", "--data", str(toy_data), "--preset", "tiny", "--out", str(out),
              "--members", "2", "--resume", "--device", "cpu", "--set", *settings])  # fmt: skip
    assert (out / "member1" / AVERAGE_FILE).exists()


def _members_command(data: Path, out: Path, *settings: str) -> list[str]:
    return [sys.executable, "-m", "transduce", "train", "--data", str(data), "--preset", "tiny",
            "--out", str(out), "--members", "2", "--device", "cpu", "--set", *TOY,
            "train.valid_every=10", *settings]  # fmt: skip


@dataclass
class _Run:
    """A training command started, its stderr read as it comes (a pipe nobody reads fills up,
    and a member writing to it then blocks for good)."""

    process: subprocess.Popen
    lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.process.stderr))
        self.reader.start()

    def stderr(self, timeout: float) -> str:
        """All the command wrote, once it and its members (the pipe's last writers) ended."""
        self.process.wait(timeout)
        self.reader.join(timeout)
        assert not self.reader.is_alive(), "a member wrote on after its command ended"
        return "".join(self.lines)


@contextmanager
def _training(command: list[str], out: Path, **popen) -> Iterator[_Run]:
    """`command` started, once both members have saved a step checkpoint (the first, at update
    10, is gone by update 30 with keep_last 2: a member may start well ahead of the other);
    whatever fails, no process of it is left training (a member that outlives a failed test
    would train on for hours)."""
    run = _Run(subprocess.Popen(command, stderr=subprocess.PIPE, text=True, **popen))
    spawned: list[int] = []
    try:
        for member in ("member1", "member2"):
            folder = out / member / "checkpoints"
            saved = partial(_has_step_checkpoint, folder)
            wait_for(saved, run.process, f"a step checkpoint in {folder}")
        spawned = _members_of(run.process.pid)
        assert len(spawned) == 2
        yield run
    finally:
        run.process.kill()
        for pid in spawned:
            with suppress(OSError):
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)


def _has_step_checkpoint(folder: Path) -> bool:
    return any(folder.glob("step_*.pt"))


def _members_of(pid: int) -> list[int]:
    """The member processes `pid` started (multiprocessing's spawned children)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            spawned = b"spawn_main" in (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if parent == pid and spawned:
            found.append(int(stat.parent.name))
    return found
