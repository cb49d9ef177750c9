"""The training loop (s5): token batches, accumulation, the schedule, validation, checkpoints.

A run lives in one folder: `config.json` (the resolved Config), `vocab.model`, `log.jsonl`,
`curve.png`, `checkpoints/` (the last K and the best) and, at the end, `average.pt`; each
checkpoint also carries the config and the vocabulary, so one file is a whole model.
`resume=True` continues from the newest good checkpoint with the same data order, schedule (with
what it learned from validations) and random state, so a resumed run ends where an uninterrupted
one would. Ctrl-C or SIGTERM stops a run after its current update, saved (stopping.py). Under
torchrun, each process trains on its share of the batches (distributed.py) and only the first one
writes.
"""

from __future__ import annotations

import logging
import random
import signal
import time
from contextlib import closing, nullcontext
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ..config import Config
from ..data.batching import Batch, collate
from ..data.dataset import PreparedData
from ..data.epochs import Pairs, TrainingEpochs
from ..models import bf16, build_model, count_parameters
from ..models.dropout import LateDropout
from ..runtime import pick_device
from ..tasks import get_task, resolve_config
from . import distributed
from .both_ways import BothWays
from .checkpoint import AVERAGE_FILE, CheckpointStore, average, save, steps_to_average
from .compiled import compile_layers, compiles
from .rdrop import RDropUpdates
from .resume import Progress, capture_rng, restore_rng, update_groups
from .runlog import (
    RunLog,
    Window,
    claim_run_folder,
    keep_log_until,
    plot_learning_curve,
    write_run_folder,
)
from .schedule import budget_used, cooldown_factor, make_optimizer, make_schedule
from .step import StepResult, TrainingError, explain_out_of_memory, train_step
from .stopping import StopRequests, TrainingStopped
from .validation import validate
from .warm_start import load_initial_weights

logger = logging.getLogger(__name__)

MAX_BAD_STEPS = 20  # consecutive non-finite losses before a run gives up


def train(
    config: Config,
    data_dir: Path,
    run_dir: Path,
    *,
    resume: bool = False,
    device: str | None = None,
) -> Path:
    """Train on a prepared dataset into `run_dir`; returns the path of the final averaged model."""
    target = pick_device(device)
    processes = distributed.start(target.type)
    if processes.parallel and target.type == "cuda":
        target = torch.device("cuda", processes.local_rank)
        torch.cuda.set_device(target)
    claim = None
    try:
        data = PreparedData.load(data_dir)
        claim = processes.on_main(lambda: claim_run_folder(Path(run_dir)))  # one writer
        # No name holds the Trainer, so that `stop` can free it before leaving the group.
        average = Trainer(config, data, Path(run_dir), resume, target, processes).run()
        # Leave together: a gloo process whose peer tears the group down first can abort.
        processes.barrier()
        return average
    finally:
        if claim is not None:
            claim.release()
        distributed.stop()


class Trainer:
    """One run: the model, optimiser, batches, checkpoints and log of a run folder."""

    def __init__(
        self,
        config: Config,
        data: PreparedData,
        run_dir: Path,
        resume: bool,
        device: torch.device,
        processes: distributed.Processes | None = None,
    ):
        self.data, self.run_dir, self.device = data, run_dir, device
        self.processes = processes or distributed.Processes()
        self.config = resolve_config(config, data)
        self.cpu_bf16 = bf16.chosen(self.config.train.precision, device, self.config.model)
        if self.cpu_bf16:
            bf16.prepare(self.config.model)  # refused before an hour of emulated, slower products
        self.processes.on_main(lambda: write_run_folder(run_dir, self.config, data, resume))
        if self.config.train.threads:
            torch.set_num_threads(self.config.train.threads)
        self.vocab, self.task = data.vocab, get_task(self.config.task)
        self.model, self.network, self.optimizer = self._build_model()
        self.late_dropout = LateDropout(self.model, self.config.train.late_dropout)
        self.rdrop = RDropUpdates(self.config.train, self.late_dropout, resumed=resume)
        self.compiled = (
            compiles(self.config.train.compile, device) and compile_layers(self.model) > 0
        )
        self.schedule = make_schedule(self.config)
        self.epochs = self._build_epochs()
        self.store = CheckpointStore(run_dir, self.config.train.keep_last)
        self.progress = Progress(world=self.processes.world)
        self._consecutive_bad = 0
        self._epoch_batches = ((-1, 0), 0)  # ((epoch, way), its batches), for `_budget_used`
        self._validate_first = False  # a validation to redo: it failed when the run stopped
        self._resumed_stopped = False  # from a stopped file (an old one: no step file of its step)
        self.stops = StopRequests()
        if not (resume and self._restore()):  # a new run: from init_from's weights, if named
            load_initial_weights(self.model, self.config, data)
        self.log = RunLog(run_dir, self.progress.step if resume else None)
        logger.info(
            "model: %s parameters; device %s%s; %d process(es)",
            f"{count_parameters(self.model):,}",
            device,
            ", its matrix products in bfloat16" if self.cpu_bf16 else "",
            self.processes.world,
        )

    # --- setup ----------------------------------------------------------------------------

    def _build_model(self):
        train = self.config.train
        torch.manual_seed(train.seed)  # the same initial parameters in every process
        model = build_model(self.config.model, self.vocab).to(self.device)
        # Each process draws its own dropout masks; one process keeps the seed as it is.
        torch.manual_seed(train.seed + 1000 * self.processes.rank)
        random.seed(train.seed)
        network = model
        if self.processes.parallel:
            ids = [self.device.index] if self.device.type == "cuda" else None
            network = DistributedDataParallel(model, device_ids=ids)
        optimizer = make_optimizer(model.parameters(), train, self.device)
        return model, network, optimizer

    def _build_epochs(self) -> TrainingEpochs:
        split, data, processes = self.data.split("train"), self.config.data, self.processes
        epochs = TrainingEpochs(
            split,
            self.vocab,
            data,
            seed=self.config.train.seed,
            rank=processes.rank,
            world=processes.world,
        )
        if epochs.num_batches(0) == 0:  # else the loop would wait forever for a batch
            raise TrainingError(
                f"no training batch: {epochs.sampler(0).n_skipped} of {len(split)} pairs exceed "
                f"data.max_tokens={data.max_tokens}, and {processes.world} "
                "process(es) need a batch each; raise data.max_tokens"
            )
        return epochs

    def _restore(self) -> bool:  # False: no checkpoint to resume from
        self.processes.on_main(self.store.recover)
        state = self.store.load_latest()
        log_path = self.run_dir / "log.jsonl"
        if state is None:
            logger.warning("nothing to resume in %s: starting afresh", self.run_dir)
            self.processes.on_main(lambda: keep_log_until(log_path, 0))
            return False
        world = state["progress"].get("world", 1)
        if world != self.processes.world:
            raise TrainingError(
                f"{self.run_dir} was trained by {world} process(es); resume it with as many, "
                f"not {self.processes.world}"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if "schedule" in state:  # checkpoints from before schedules had a state: stateless
            self.schedule.load_state_dict(state["schedule"])
        self.progress = Progress.from_state(state["progress"])
        self._validate_first = state.get("validate_first", False)
        self._resumed_stopped = state.get("stopped", self.progress.step not in self.store.steps())
        restore_rng(state["rng"], self.processes.rank)
        # Forget what a killed session logged after its checkpoint: it will be redone.
        self.processes.on_main(lambda: keep_log_until(log_path, self.progress.step))
        logger.info("resumed from step %d (epoch %d)", self.progress.step, self.progress.epoch)
        return True

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> Path:
        """Train to the budget, then average: the averaged model's path. A signal raises
        TrainingStopped once the run's state is saved for `--resume`."""
        quiet = None if self.processes.is_main else True
        bar = tqdm(total=self.config.train.max_steps, initial=self.progress.step, unit="step",
                   disable=quiet, dynamic_ncols=True)  # fmt: skip
        # Both closed come what may: the log's TensorBoard thread must not outlive a run.
        with self.stops.listening(), closing(self.log), bar:
            self._train(bar)
        return self._average()

    def _train(self, bar: tqdm) -> None:
        train = self.config.train
        unsaved = self._resumed_stopped and not self._validate_first  # the end must save it
        if self._validate_first:
            self._validate_and_save()
        session_start, elapsed_before = time.monotonic(), self.progress.elapsed
        last_saved, window = None if unsaved else self.progress.step, Window()
        used = self._budget_used()
        way = BothWays(train.both_ways, self.progress, self.epochs, self._budget_used).starting
        updates = update_groups(self.epochs, self.progress, train.accumulate, train.max_epochs, way)
        for group in updates if used < 1 else ():  # a finished run trains no further
            rate = self._rate(used)
            result = self._update(group, rate)
            self.progress.elapsed = elapsed_before + time.monotonic() - session_start
            window.add(result.loss, result.nll, result.tgt_tokens)
            bar.update(1)
            bar.set_postfix(loss=f"{result.loss:.3f}", lr=f"{rate:.2e}",
                            tok_s=f"{window.tokens_per_second():.0f}")  # fmt: skip
            if self.progress.step % train.log_every == 0:
                self._log({"kind": "train", **window.summary(), "lr": rate})
                window = Window()
            if self.progress.step % train.valid_every == 0:
                self._validate_and_save()
                last_saved = self.progress.step
                window.restart_clock()  # tokens/s measures training, not validation
            if asked := self._stop_asked():
                bar.close()
                self._stop(asked, saved=self.progress.step == last_saved)
            used = self._budget_used()
            if used >= 1:
                break
        bar.close()
        if self.progress.step != last_saved:
            self._validate_and_save()

    def _rate(self, used: float) -> float:
        """The rate of the next update: the schedule's, times the cooldown at the budget's end."""
        rate = self.schedule.rate(self.progress.step + 1)
        return rate * cooldown_factor(used, self.config.train.cooldown)

    def _update(self, group: list[Pairs], rate: float) -> StepResult:
        """One update over a group of batches; gives up after too many non-finite losses."""
        train = self.config.train
        batches = [self._collate(pairs) for pairs in group]
        if self.late_dropout.before(self.progress.step + 1):
            logger.info("update %d: dropout begins (train.late_dropout)", self.progress.step + 1)
        with explain_out_of_memory(self.config):
            result = train_step(
                self.network,
                self.optimizer,
                batches,
                rate=rate,
                label_smoothing=train.label_smoothing,
                pad=self.vocab.pad,
                clip_norm=train.clip_norm,
                processes=self.processes,
                autocast=self._autocast,
                fused_loss=self.compiled,
                rdrop=self.rdrop.alpha(self.progress.step + 1),
            )
        self.progress.step += 1
        self._count_bad(result.finite)
        return result

    def _count_bad(self, finite: bool) -> None:
        if finite:
            self._consecutive_bad = 0
            return
        self.progress.bad_steps += 1
        self._consecutive_bad += 1
        logger.warning("non-finite loss at step %d: update skipped", self.progress.step)
        if self._consecutive_bad >= MAX_BAD_STEPS:
            raise TrainingError(
                f"{MAX_BAD_STEPS} non-finite losses in a row at step {self.progress.step}: "
                "lower train.lr_scale or raise train.warmup_steps; the last good "
                f"checkpoint is in {self.store.dir}"
            )

    def _budget_used(self) -> float:
        """How much of the run's steps, epochs or minutes is spent (schedule.budget_used)."""
        progress, epochs = self.progress, self.progress.epoch + self._epoch_fraction()
        used = budget_used(self.config.train, progress.step, epochs, progress.elapsed)
        if not self.config.train.max_minutes:
            return used  # steps and epochs are the same in every process
        # Clocks differ between processes: all take the furthest, to stop (and cool) together.
        return self.processes.max(used)

    def _epoch_fraction(self) -> float:
        key = (self.progress.epoch, self.epochs.both_ways_epochs)  # the way changes its batches
        if self._epoch_batches[0] != key:
            self._epoch_batches = (key, self.epochs.num_batches(key[0]))
        return self.progress.batch_in_epoch / max(self._epoch_batches[1], 1)

    def _collate(self, pairs) -> Batch:
        return collate(pairs, self.vocab.pad, self.vocab.bos, self.vocab.eos).to(self.device)

    def _autocast(self):
        if self.device.type == "cuda" and self.config.train.precision in ("auto", "bf16"):
            return torch.autocast("cuda", dtype=torch.bfloat16)
        if self.cpu_bf16:
            return bf16.products()
        return nullcontext()

    def _stop_asked(self) -> int:
        """The signal that asked any process to stop (0: none): all stop after the same update."""
        return int(self.processes.max(float(self.stops.signal_number)))

    def _stop(self, number: int, saved: bool) -> None:
        """Save this step's state (unless its checkpoint was just written), and stop."""
        step = self.progress.step
        if saved:
            path = self.store.path(step)
        else:
            rng = self.processes.gather(capture_rng())
            path = self.store.stopped_path(step)
            self.processes.on_main(lambda: self.store.save_stopped(self._state(rng), step))
        asked = signal.Signals(number).name
        message = f"{asked} at step {step}: saved {path}; --resume continues the run"
        raise TrainingStopped(message, speaks=self.processes.is_main)

    # --- validation, checkpoints, logs -----------------------------------------------------

    def _validate_and_save(self) -> None:
        rng = self.processes.gather(capture_rng())  # every process takes part
        self.processes.on_main(lambda: self._validate_and_save_on_main(rng))
        # Only the main process validated: its schedule is everyone's.
        self.schedule.load_state_dict(self.processes.gather(self.schedule.state_dict())[0])

    def _validate_and_save_on_main(self, rng: list[dict]) -> None:
        metric = self.task.metric
        try:
            scores = validate(
                self.model, self.data, self.config, self.device, self._autocast, self.task
            )
        except Exception as error:
            # Keep the updates since the last checkpoint: `--resume` redoes this validation.
            state = self._state(rng) | {"validate_first": True}
            path = self.store.save_stopped(state, self.progress.step)
            raise TrainingError(
                f"validation at step {self.progress.step} failed ({type(error).__name__}: "
                f"{error}); the model is saved in {path}: once the cause is fixed, --resume "
                "validates it and goes on"
            ) from error
        record = {"kind": "valid", "step": self.progress.step, **scores}
        self._log(record)
        self.schedule.observe(record)  # before the save: the checkpoint holds what it learned
        # Without the task's score, a lower dev loss is better.
        score = record[metric] if metric in record else -record["loss"]
        higher = self.task.higher_is_better if metric in record else True
        self.store.save(self._state(rng), self.progress.step, score, higher_is_better=higher)
        plot_learning_curve(self.log.path, self.run_dir / "curve.png", metric)
        logger.info(
            "step %d: %s",
            self.progress.step,
            ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k not in ("kind", "step")),
        )

    def _state(self, rng: list) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "step": self.progress.step,
            "progress": vars(self.progress).copy(),
            "rng": rng,  # one per process
            "config": self.config.to_json(),
            "vocab": self.vocab.serialized,  # so that one file is a whole model
        }

    def _log(self, record: dict) -> None:
        if self.processes.is_main:
            record.setdefault("step", self.progress.step)
            record["elapsed"] = round(self.progress.elapsed, 2)
            self.log.write(record)

    def _average(self) -> Path:
        """`average.pt`: the last checkpoints past warmup averaged (s6.1; steps_to_average)."""
        out = self.run_dir / AVERAGE_FILE

        def write_average() -> None:
            steps = steps_to_average(self.store.steps(), self.progress.step, self.config.train)
            paths = [self.store.path(s) for s in steps]
            save(average(paths), out)
            if len(paths) == 1:
                logger.info("final model: the checkpoint of step %d, as %s", steps[0], out)
            else:
                logger.info("averaged %d checkpoints into %s", len(paths), out)

        self.processes.on_main(write_average)
        return out
