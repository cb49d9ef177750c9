"""An ensemble trained in one command: `transduce train --members K`.

K models of the same settings but their seeds train side by side, each in a process of its own
with its share of the CPU cores, into OUT/member1 ... OUT/memberK. OUT/members.json names them, so
that whatever decodes a run folder (`translate`, `score`, `serve`, the attention views, the
Python API's `load`) decodes OUT as their ensemble (models/ensemble.py).

Why: on a CPU of few cores, K trainings of one thread each get through more updates together than
one of K threads (small products use cores poorly), and an ensemble gains over its members:
`tiny`'s hour on a 2-core Zen 4 gave one model of 40.84 test BLEU on both threads, or with
`--members 2` two of 41.34 and 40.52, 41.75 together (benchmarks/RESULTS.md, runs 28-29).

Signals go through this process: each member runs in a process group of its own, and every
SIGINT or SIGTERM that reaches this one is passed on once to each member, which saves a
checkpoint after its update and stops (a second stops at once), as one run does
(training/stopping.py). A member whose parent dies (killed) stops the same way.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from pathlib import Path

from ..config import Config, override
from ..files import atomic_write

logger = logging.getLogger(__name__)

MEMBERS_FILE = "members.json"
STOPPED = 3  # a member's exit status when it stopped on request (its checkpoint saved)


def member_folders(path: Path | str) -> list[Path] | None:
    """The run folders of the ensemble trained into `path`; None if `path` is not one."""
    file = Path(path) / MEMBERS_FILE
    if not file.is_file():
        return None
    try:
        names = json.loads(file.read_text(encoding="utf-8"))["members"]
    except (ValueError, KeyError, TypeError) as error:  # hand-edited or damaged
        raise ValueError(f"{file}: not a list of an ensemble's members ({error})") from error
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{file}: 'members' must name the member folders, not {names!r}")
    return [Path(path) / name for name in names]


def threads_each(config: Config, jobs: int) -> Config:
    """With `jobs` trainings side by side and train.threads 0, each gets its share of the cores."""
    if jobs == 1 or config.train.threads:
        return config
    return override(config, {"train.threads": max(1, (os.cpu_count() or 1) // jobs)})


def member_config(config: Config, member: int, members: int) -> Config:
    """Member `member` (from 1): the run's settings, the seed counted on from train.seed."""
    seeded = override(config, {"train.seed": config.train.seed + member - 1})
    return threads_each(seeded, members)


def train_members(
    config: Config,
    data_dir: Path,
    run_dir: Path,
    members: int,
    *,
    resume: bool = False,
    device: str | None = None,
) -> list[Path]:
    """Train `members` models into `run_dir`'s member folders at once; returns the folders.

    A member that fails or stops does not stop the others; the call then raises, naming it, once
    all have ended (`resume=True` continues each where it stopped)."""
    from ..data.dataset import PreparedData
    from .loop import TrainingError
    from .stopping import TrainingStopped

    if members < 2:
        raise ValueError(f"an ensemble needs at least 2 members, not {members}: train one model")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("--members trains its models side by side: not under torchrun")
    PreparedData.load(data_dir)  # a bad folder is said once, here, not by every member
    folders = _claim_members(Path(run_dir), members, resume)
    logger.info("training %d models side by side into %s", members, ", ".join(map(str, folders)))
    processes = _start(config, Path(data_dir), folders, resume, device)
    with _passing_signals_on(processes):
        for process in processes:
            process.join()
    stopped = [p.name for p in processes if p.exitcode == STOPPED]  # named by their folders
    failed = [p.name for p in processes if p.exitcode not in (0, STOPPED)]
    if failed:
        raise TrainingError(
            f"{', '.join(failed)} of {run_dir} failed (above); fix the cause, then --resume "
            "trains every member on from its newest checkpoint"
        )
    if stopped:
        raise TrainingStopped(f"{', '.join(stopped)} of {run_dir} saved and stopped; --resume "
                              "continues them")  # fmt: skip
    logger.info("the ensemble of %d models is %s: `transduce translate --model %s`",
                members, run_dir, run_dir)  # fmt: skip
    return folders


def _claim_members(run_dir: Path, members: int, resume: bool) -> list[Path]:
    """The member folders, named in run_dir/members.json before any trains (a run stopped
    early still decodes as the ensemble of what its members have saved)."""
    from .runlog import RunFolderError

    names = [f"member{k}" for k in range(1, members + 1)]
    before = member_folders(run_dir)
    if before is not None and not resume:
        raise RunFolderError(f"{run_dir} already holds an ensemble: pass --resume or a new --out")
    if before is not None and [f.name for f in before] != names:
        raise RunFolderError(
            f"{run_dir} holds an ensemble of {len(before)} models, not {members}: --resume it "
            f"with --members {len(before)}"
        )
    if before is None and (run_dir / "config.json").exists():
        raise RunFolderError(f"{run_dir} holds one model's run: name a new --out for an ensemble")
    run_dir.mkdir(parents=True, exist_ok=True)
    listed = json.dumps({"members": names}, indent=2) + "\n"
    atomic_write(listed.encode(), run_dir / MEMBERS_FILE)  # never half a list for a loader
    return [run_dir / name for name in names]


def _start(
    config: Config, data_dir: Path, folders: list[Path], resume: bool, device: str | None
) -> list[BaseProcess]:
    context = multiprocessing.get_context("spawn")  # fresh processes: no threads carried over
    level = logging.getLogger("transduce").getEffectiveLevel()
    processes = []
    for member, folder in enumerate(folders, start=1):
        settings = member_config(config, member, len(folders))
        started = resume and (folder / "checkpoints").exists()
        work = (settings, data_dir, folder, started, device, level)
        processes.append(context.Process(target=_train_member, args=work, name=folder.name))
        processes[-1].start()
    return processes


@contextmanager
def _passing_signals_on(processes: list[BaseProcess]) -> Iterator[None]:
    """While the members train, each SIGINT or SIGTERM here goes on to every member alive."""

    def pass_on(number: int, frame: object) -> None:
        logger.warning("%s: passed on to each member", signal.Signals(number).name)
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, number)

    numbers = (signal.SIGINT, signal.SIGTERM)
    previous = {number: signal.signal(number, pass_on) for number in numbers}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _train_member(
    config: Config, data_dir: Path, folder: Path, resume: bool, device: str | None, level: int
) -> None:
    """One member, in its own process: its log lines carry its name; its exit status says how
    it ended (0 trained, STOPPED on request, 1 failed)."""
    import sys

    from .loop import train
    from .stopping import TrainingStopped

    os.setpgrp()  # Ctrl-C reaches the parent only, which passes it on once
    logging.basicConfig(level=level, format=f"%(asctime)s {folder.name} %(message)s",
                        datefmt="%H:%M:%S")  # fmt: skip
    threading.Thread(target=_stop_when_parent_dies, daemon=True).start()
    try:
        train(config, data_dir, folder, resume=resume, device=device)
    except TrainingStopped as stopped:
        logger.warning("%s", stopped)
        sys.exit(STOPPED)
    except KeyboardInterrupt:  # asked twice: stopped at once
        logger.warning("stopped at once; --resume continues from its newest checkpoint")
        sys.exit(STOPPED)
    except Exception as error:
        logger.error("failed: %s: %s", type(error).__name__, error)
        sys.exit(1)


def _stop_when_parent_dies() -> None:
    """A member outliving its parent (killed) saves and stops, as on SIGTERM."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGTERM)
