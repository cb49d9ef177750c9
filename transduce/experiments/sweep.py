"""The Table 3 sweep (s6.2): each row of (A)-(E) and big, scaled to a base, trained and scored.

`sweep` trains every row (experiments/table3.py) with seeds 1..n for a budget of updates or
minutes (big 3x, as the paper's 300K steps against 100K) and scores each run as the paper's
Table 3 does: dev perplexity per subword (the dev loss without label smoothing, exponentiated)
and the dev score of the task's beam search (beam 4, alpha 0.6 for translation) from the last
checkpoint, without averaging. After every run it rewrites `table3.md` (the paper's table with
our numbers beside the paper's), `table3.csv` and `table3.json` (sweep_report.py).

Runs resume where they stopped; a finished run is not trained again (its result is kept in
`ROW-seedN/sweep-result.json` with the config it was trained with); a run that raises is
reported as failed and the others go on; a row that cannot be scaled to the base says why.

With `jobs` > 1, that many runs train at once, each in a process of its own: on a small
model, two 1-thread runs side by side do about 1.4x the work of one 2-thread run on two
cores (measured, benchmarks/table3-tiny.md).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..config import Config, DecodeConfig, override, parse_assignments
from ..data.dataset import PreparedData
from ..decoding.translate import Translator
from ..models import count_parameters
from ..models.saved import load_model
from ..presets import preset
from ..runtime import pick_device
from ..tasks import get_task
from ..training.checkpoint import AVERAGE_FILE, CheckpointStore
from ..training.loop import train
from ..training.members import threads_each
from ..training.runlog import read_log
from ..training.validation import dev_loss
from .compare import translate_and_score
from .sweep_report import write_report
from .table3 import ROW_NAMES, CannotScale, row_config

logger = logging.getLogger(__name__)

RESULT_FILE = "sweep-result.json"


@dataclass
class RunResult:
    """One row trained with one seed; `error` says why it failed, else it is ""."""

    row: str
    seed: int
    error: str = ""
    dev_ppl: float | None = None  # per subword, without label smoothing
    dev_score: float | None = None  # the task's metric (BLEU), beam search, last checkpoint
    metric: str = ""
    signature: str = ""
    parameters: int | None = None
    updates: int | None = None
    minutes: float | None = None  # training wall time


@dataclass
class RowResult:
    """A row of the table: its config at this base (None: it cannot be scaled) and its runs."""

    row: str
    config: Config | None
    note: str = ""  # why the row cannot be scaled
    runs: list[RunResult] = field(default_factory=list)


def sweep_base(
    name: str,
    *,
    minutes: float | None = None,
    steps: int | None = None,
    assignments: Sequence[str] = (),
) -> Config:
    """The preset `name` with the sweep's budget per row, then `assignments` (`--set`).

    Rows are scored with the task's own beam search (s6.1's beam 4 and alpha 0.6 for
    translation), as the paper scores Table 3, not with a preset's own choice (`tiny`'s alpha
    1.0): the rows stay comparable with the paper's and with the runs of earlier sweeps."""
    budget: dict[str, object] = {"train.valid_bleu": False}  # scored once, by beam search
    if minutes:
        budget |= {"train.max_minutes": minutes, "train.max_steps": steps or 10**9}
    elif steps:
        budget["train.max_steps"] = steps
    base = replace(override(preset(name), budget), decode=DecodeConfig())
    return override(base, parse_assignments(list(assignments)))


def plan(base: Config, names: Sequence[str] = ROW_NAMES) -> list[RowResult]:
    """Each named row's config at `base`, or why it has none."""
    rows = []
    for name in names:
        try:
            rows.append(RowResult(name, row_config(base, name)))
        except CannotScale as error:
            logger.warning("row %s cannot be scaled to this base: %s", name, error)
            rows.append(RowResult(name, None, note=str(error)))
    return rows


def sweep(
    data_dir: Path,
    out: Path,
    base: Config,
    *,
    rows: Sequence[str] = ROW_NAMES,
    seeds: int = 1,
    one_seed_beyond: float | None = None,
    jobs: int = 1,
    device: str | None = None,
    description: str = "",
) -> list[RowResult]:
    """Train and score each row of `rows` at `base` with seeds 1..`seeds`; see the module.

    Seed by seed: a sweep stopped in its second seed already holds every row once. With
    `one_seed_beyond`, a row whose first seed scores at least that far from the base (the mean
    of its seeds, e.g. 1.0 BLEU) keeps one seed: its direction does not need the spread. A
    row's later seeds therefore wait for its first seed and all the base's.
    With `jobs` > 1, runs train `jobs` at a time in processes of their own, each with
    train.threads threads (if 0: the cores shared out). `description` heads the report, e.g.
    the command.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    data_dir, out = Path(data_dir), Path(out)
    PreparedData.load(data_dir)  # a folder that is not prepared data fails here, not per run
    results = plan(base, rows)
    waiting = [(r, seed) for seed in range(1, seeds + 1) for r in results if r.config is not None]
    number, started = 0, time.monotonic()
    pool, running = _workers(jobs), {}
    try:
        while waiting or running:
            while len(running) < jobs and (ready := _next_run(waiting, results, seeds,
                                                              one_seed_beyond)):  # fmt: skip
                result, seed = ready
                number += 1
                logger.info("[run %d/%d] row %s, seed %d of %d", number,
                            number + len(waiting), result.row, seed, seeds)  # fmt: skip
                config = threads_each(override(result.config, {"train.seed": seed}), jobs)
                run_dir = out / f"{result.row}-seed{seed}"
                task = (config, result.row, seed, data_dir, run_dir, device,
                        logging.getLogger().level)  # fmt: skip
                future, pool = _submit(pool, jobs, task)
                running[future] = ready
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                result, seed = running.pop(future)
                run = _outcome(future, result.row, seed)
                result.runs = sorted([*result.runs, run], key=lambda r: r.seed)
                write_report(results, base, out, description)
                _log_progress(run, number - len(running), number + len(waiting),
                              time.monotonic() - started)  # fmt: skip
    finally:
        pool.shutdown(cancel_futures=True)
    write_report(results, base, out, description)
    return results


def _far_from_base(result: RowResult, results: list[RowResult], beyond: float | None) -> bool:
    """Whether the row's first seed scored at least `beyond` from the base's mean score."""
    base = next((r for r in results if r.row == "base"), None)
    if beyond is None or base is None or result is base:
        return False
    first = next((run for run in result.runs if run.seed == 1 and not run.error), None)
    base_scores = [run.dev_score for run in base.runs if not run.error]
    if first is None or not base_scores:
        return False
    distance = abs(first.dev_score - statistics.mean(base_scores))
    if distance >= beyond:
        logger.info("row %s: %.2f from the base's mean with seed 1: one seed", result.row, distance)
    return distance >= beyond


def _next_run(
    waiting: list[tuple[RowResult, int]],
    results: list[RowResult],
    seeds: int,
    beyond: float | None,
) -> tuple[RowResult, int] | None:
    """Takes from `waiting` the first run that may start now, dropping on the way the next
    seeds of rows whose first seed is `beyond` from the base's mean (they keep one seed)."""
    for candidate in list(waiting):
        result, seed = candidate
        if not _may_start(candidate, results, seeds):
            continue  # it waits for its row's first seed or the base's
        waiting.remove(candidate)
        if seed == 1 or not _far_from_base(result, results, beyond):
            return candidate
    return None


def _may_start(waiting: tuple[RowResult, int], results: list[RowResult], seeds: int) -> bool:
    """Whether a waiting run may start: a first seed at once; the base's later seeds after its
    first; another row's later seeds after its first and every seed of the base (the
    one-seed-beyond rule compares with the base's mean)."""
    result, seed = waiting
    if seed == 1:
        return True
    if not any(run.seed == 1 for run in result.runs):
        return False
    base = next((r for r in results if r.row == "base" and r.config is not None), None)
    if base is None or result is base:
        return True
    return {run.seed for run in base.runs} >= set(range(1, seeds + 1))


class _InProcess:
    """The pool of `jobs` = 1: each run trains in this process, when it is submitted."""

    def submit(self, function, *args) -> Future:
        future: Future = Future()
        future.set_result(function(*args))
        return future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def _workers(jobs: int) -> _InProcess | ProcessPoolExecutor:
    if jobs == 1:
        return _InProcess()
    # A fresh process per run: no memory or threads carried over from the last one.
    return ProcessPoolExecutor(
        jobs, mp_context=multiprocessing.get_context("spawn"), max_tasks_per_child=1
    )


def _submit(
    pool: _InProcess | ProcessPoolExecutor, jobs: int, task: tuple
) -> tuple[Future, _InProcess | ProcessPoolExecutor]:
    """`task` submitted to `pool`, or, when a run's process has died and broken it, to a fresh
    pool (the runs beside the dead one have failed with it): the future and the pool."""
    try:
        return pool.submit(_task, *task), pool
    except BrokenProcessPool:
        pool.shutdown(wait=False, cancel_futures=True)
        fresh = _workers(jobs)
        return fresh.submit(_task, *task), fresh


def _task(
    config: Config, row: str, seed: int, data_dir: Path, run_dir: Path, device: str | None,
    log_level: int,
) -> RunResult:  # fmt: skip
    """One run, in the pool's process (its own, with `jobs` > 1): logs carry the run's name."""
    if multiprocessing.parent_process() is not None:  # a process of its own: log as the CLI
        logging.basicConfig(level=log_level, format=f"%(asctime)s {row}-seed{seed} %(message)s",
                            datefmt="%H:%M:%S")  # fmt: skip
    if config.train.threads:
        import torch

        torch.set_num_threads(config.train.threads)  # scoring too, not only training
    try:
        data = PreparedData.load(data_dir)
    except Exception as error:
        return RunResult(row, seed, error=f"{type(error).__name__}: {error}")
    return _run_safely(config, row, seed, data, run_dir, device)


def _outcome(future: Future, row: str, seed: int) -> RunResult:
    """The run's result; a process that died (killed, out of memory) fails its run, and the
    runs beside it (the pool cannot tell which one died): run the sweep again to resume them."""
    try:
        return future.result()
    except BrokenProcessPool:
        return RunResult(row, seed, error="its process died; run the sweep again to resume it")
    except Exception as error:  # e.g. a config that cannot be sent to the process
        return RunResult(row, seed, error=f"{type(error).__name__}: {error}")


def _run_safely(
    config: Config, row: str, seed: int, data: PreparedData, run_dir: Path, device: str | None
) -> RunResult:
    try:
        return _run(config, row, seed, data, run_dir, device)
    except Exception as error:  # one failed row is reported; the others go on
        logger.exception("row %s, seed %d failed", row, seed)
        return RunResult(row, seed, error=f"{type(error).__name__}: {error}")


def _run(
    config: Config, row: str, seed: int, data: PreparedData, run_dir: Path, device: str | None
) -> RunResult:
    saved = run_dir / RESULT_FILE
    finished = (run_dir / AVERAGE_FILE).exists()
    if saved.exists():
        kept = json.loads(saved.read_text())
        if _same_training(Config.from_dict(kept["config"]), config):
            logger.info("%s: finished, not trained again", run_dir)
            return RunResult(**kept["result"])
        logger.info("%s: its budget changed since it finished: training on", run_dir)
        finished = False
    if not finished:  # a killed run goes on where it stopped
        train(config, data.path, run_dir, resume=(run_dir / "checkpoints").exists(), device=device)
    result = _score(run_dir, row, seed, data, device)
    record = {"config": json.loads(config.to_json()), "result": asdict(result)}
    saved.write_text(json.dumps(record, indent=2))
    return result


def _same_training(kept: Config, asked: Config) -> bool:
    """Equal but for train.threads, which sets the speed, not what the run learns."""
    return override(kept, {"train.threads": 0}) == override(asked, {"train.threads": 0})


def _score(run_dir: Path, row: str, seed: int, data: PreparedData, device: str | None) -> RunResult:
    """Dev perplexity and the dev score of beam search, from the last checkpoint (no average)."""
    last = CheckpointStore(run_dir, keep_last=1).last_paths(1)
    if not last:
        raise FileNotFoundError(f"{run_dir}: no checkpoint to score")
    saved, target = load_model(run_dir, last[0]), pick_device(device)
    model, config = saved.model.to(target), saved.config
    ppl = dev_loss(model, data, config, target, nullcontext)["ppl"]
    translator = Translator(model, saved.vocab, config.decode, target, config.task)
    score = translate_and_score(translator, data, "dev", run_dir)
    log = read_log(run_dir / "log.jsonl")
    return RunResult(
        row,
        seed,
        dev_ppl=ppl,
        dev_score=score["score"],
        metric=get_task(config.task).metric,
        signature=score["signature"],
        parameters=count_parameters(model),
        updates=saved.step,
        minutes=max((r["elapsed"] for r in log), default=0.0) / 60,
    )


def _log_progress(run: RunResult, number: int, total: int, seconds: float) -> None:
    if run.error:
        logger.warning("row %s, seed %d: FAILED (%s)", run.row, run.seed, run.error)
    else:
        logger.info(
            "row %s, seed %d: dev ppl %.2f, dev %s %.2f, %d updates in %.1f min",
            run.row, run.seed, run.dev_ppl, run.metric, run.dev_score, run.updates, run.minutes,
        )  # fmt: skip
    logger.info("sweep: %d of %d runs done, %.1f min this session", number, total, seconds / 60)
