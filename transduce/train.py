"""The training loop (s5): token batches, accumulation, eq. 3, validation, checkpoints, logs.

A run lives in one folder: `config.json` (the resolved Config), `vocab.model`, `log.jsonl`,
`curve.png`, `checkpoints/` (the last K and the best) and, at the end, `average.pt`.
`resume=True` continues from the newest good checkpoint with the same data order, schedule and
random state, so a resumed run ends where an uninterrupted one would. Under torchrun, each
process trains on its share of the batches (distributed.py) and only the first one writes.
"""

from __future__ import annotations

import json
import logging
import math
import random
import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from . import distributed
from .batching import Batch, TokenBatchSampler, collate
from .checkpoint import CheckpointStore, average, save
from .config import Config
from .dataset import PreparedData
from .loss import label_smoothed_loss
from .runlog import (
    RunFolderError,
    Window,
    append_log,
    check_same_run,
    check_writable,
    keep_log_until,
    plot_learning_curve,
)
from .runtime import pick_device
from .schedule import learning_rate, make_optimizer, set_learning_rate
from .transformer import Transformer, count_parameters
from .translate import AVERAGE_FILE
from .validation import dev_bleu, dev_loss

logger = logging.getLogger(__name__)

MAX_BAD_STEPS = 20  # consecutive non-finite losses before a run gives up


class TrainingError(RuntimeError):
    """Training cannot go on; the message says why and what to change."""


@dataclass
class Progress:
    """Where a run stands: saved in every checkpoint, restored on resume."""

    step: int = 0  # updates done
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` this process has used
    elapsed: float = 0.0  # seconds of training, summed over resumed sessions
    bad_steps: int = 0  # updates skipped for a non-finite loss, in total
    world: int = 1  # training processes; a resumed run must use as many


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
    try:
        trainer = Trainer(
            config, PreparedData.load(data_dir), Path(run_dir), resume, target, processes
        )
        average = trainer.run()
        # Leave together: a gloo process whose peer tears the group down first can abort.
        processes.barrier()
        return average
    finally:
        distributed.stop()


class Trainer:
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
        self.config = self._resolve_config(config, resume)
        if self.config.train.threads:
            torch.set_num_threads(self.config.train.threads)
        self.vocab = data.vocab
        self.model, self.network, self.optimizer = self._build_model()
        self.sampler = self._build_sampler()
        self.store = CheckpointStore(run_dir, self.config.train.keep_last)
        self.progress = Progress(world=self.processes.world)
        self.log_path = run_dir / "log.jsonl"
        self._consecutive_bad = 0
        if resume:
            self._restore()
        logger.info(
            "model: %s parameters; device %s; %d process(es)",
            f"{count_parameters(self.model):,}",
            device,
            self.processes.world,
        )

    # --- setup ----------------------------------------------------------------------------

    def _resolve_config(self, config: Config, resume: bool) -> Config:
        """Fix the vocabulary size, check the folder, write (or on resume compare) config.json."""
        config = replace(config, model=replace(config.model, vocab_size=self.data.vocab.size))

        def check_and_write() -> None:
            check_writable(self.run_dir)
            check_same_run(self.run_dir, config, resume)
            (self.run_dir / "config.json").write_text(config.to_json())
            shutil.copyfile(self.data.path / "vocab.model", self.run_dir / "vocab.model")
            (self.run_dir / "data.json").write_text(json.dumps(self.data.meta, indent=2))
            if not resume:
                keep_log_until(self.run_dir / "log.jsonl", 0)

        self._on_main(check_and_write)
        return config

    def _build_model(self):
        train = self.config.train
        torch.manual_seed(train.seed)  # the same initial parameters in every process
        model = Transformer(self.config.model, pad=self.data.vocab.pad).to(self.device)
        # Each process draws its own dropout masks; one process keeps the seed as it is.
        torch.manual_seed(train.seed + 1000 * self.processes.rank)
        random.seed(train.seed)
        network = model
        if self.processes.parallel:
            ids = [self.device.index] if self.device.type == "cuda" else None
            network = DistributedDataParallel(model, device_ids=ids)
        optimizer = make_optimizer(model.parameters(), train, fused=self.device.type == "cuda")
        return model, network, optimizer

    def _build_sampler(self) -> TokenBatchSampler:
        split = self.data.split("train")
        sampler = TokenBatchSampler(
            split.src_lengths,
            split.tgt_lengths,
            max_tokens=self.config.data.max_tokens,
            bucket_width=self.config.data.bucket_width,
            seed=self.config.train.seed,
        )
        sampler = sampler.shard(self.processes.rank, self.processes.world)
        if sampler.num_batches(0) == 0:  # else the loop would wait forever for a batch
            raise TrainingError(
                f"no training batch: {sampler.n_skipped} of {len(split)} pairs exceed "
                f"data.max_tokens={self.config.data.max_tokens}, and {self.processes.world} "
                "process(es) need a batch each; raise data.max_tokens"
            )
        return sampler

    def _restore(self) -> None:
        state = self.store.load_latest()
        if state is None:
            logger.info("nothing to resume in %s: starting afresh", self.run_dir)
            self._on_main(lambda: keep_log_until(self.log_path, 0))
            return
        world = state["progress"].get("world", 1)
        if world != self.processes.world:
            raise TrainingError(
                f"{self.run_dir} was trained by {world} process(es); resume it with as many, "
                f"not {self.processes.world}"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.progress = Progress(**{"world": 1, **state["progress"]})
        rng = state["rng"][self.processes.rank] if isinstance(state["rng"], list) else state["rng"]
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        if torch.cuda.is_available() and "cuda" in rng:
            torch.cuda.set_rng_state_all(rng["cuda"])
        # Forget what a killed session logged after its checkpoint: it will be redone.
        self._on_main(lambda: keep_log_until(self.log_path, self.progress.step))
        logger.info("resumed from step %d (epoch %d)", self.progress.step, self.progress.epoch)

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> Path:
        train = self.config.train
        bar = tqdm(
            total=train.max_steps,
            initial=self.progress.step,
            unit="step",
            disable=None if self.processes.is_main else True,
            dynamic_ncols=True,
        )
        session_start, elapsed_before = time.monotonic(), self.progress.elapsed
        last_saved, window = self.progress.step, Window()
        groups = iter(()) if self._should_stop() else self._update_groups()  # a finished run
        for group in groups:
            stats = self._update(group)
            self.progress.elapsed = elapsed_before + time.monotonic() - session_start
            window.add(stats["loss"], stats["nll"], stats["tgt_tokens"])
            bar.update(1)
            bar.set_postfix(
                loss=f"{stats['loss']:.3f}",
                lr=f"{stats['lr']:.2e}",
                tok_s=f"{window.tokens_per_second():.0f}",
            )
            if self.progress.step % train.log_every == 0:
                self._log({"kind": "train", **window.summary(), "lr": stats["lr"]})
                window = Window()
            if self.progress.step % train.valid_every == 0:
                self._validate_and_save()
                last_saved = self.progress.step
                window.restart_clock()  # tokens/s measures training, not validation
            if self._should_stop():
                break
        bar.close()
        if self.progress.step != last_saved:
            self._validate_and_save()
        return self._average()

    def _update_groups(self):
        """Groups of `accumulate` batches, epoch after epoch, from where the run stands."""
        group: list[list[int]] = []
        max_epochs = self.config.train.max_epochs
        while not (max_epochs and self.progress.epoch >= max_epochs):
            epoch = self.progress.epoch
            for indices in self.sampler.iterate(epoch, self.progress.batch_in_epoch):
                self.progress.batch_in_epoch += 1
                group.append(indices)
                if len(group) == self.config.train.accumulate:
                    yield group
                    group = []
            self.progress.epoch, self.progress.batch_in_epoch = epoch + 1, 0

    def _update(self, group: list[list[int]]) -> dict:
        """One optimiser step; the loss is per target token of the group, in all processes."""
        self.network.train()
        split, world = self.data.split("train"), self.processes.world
        batches = [self._collate(split.pairs(indices)) for indices in group]
        (n_tokens,) = self.processes.sum([sum(b.n_tgt_tokens for b in batches)])
        loss_sum = nll_sum = 0.0
        for i, batch in enumerate(batches):
            # DDP averages gradients over processes at the last backward of the group;
            # scaling by `world` turns that average into the sum over all the group's tokens.
            last = i == len(batches) - 1
            with self._no_sync(last), self._autocast(), _explain_out_of_memory(self.config):
                logits = self.network(batch.src, batch.tgt_in)
                sums = label_smoothed_loss(
                    logits, batch.tgt_out, self.config.train.label_smoothing, self.vocab.pad
                )
                (sums.loss * world / n_tokens).backward()
            loss_sum, nll_sum = loss_sum + sums.loss.item(), nll_sum + sums.nll.item()
        loss_sum, nll_sum = self.processes.sum([loss_sum, nll_sum])
        rate = self._learning_rate(self.progress.step + 1)
        self._optimizer_step(rate, finite=math.isfinite(loss_sum))
        src_tokens = sum(b.n_src_tokens for b in batches) * world  # approximately, for the log
        return {
            "loss": loss_sum / n_tokens,
            "nll": nll_sum / n_tokens,
            "lr": rate,
            "tgt_tokens": n_tokens,
            "src_tokens": src_tokens,
        }

    def _optimizer_step(self, rate: float, finite: bool) -> None:
        train = self.config.train
        if finite:
            set_learning_rate(self.optimizer, rate)
            if train.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), train.clip_norm)
            self.optimizer.step()
            self._consecutive_bad = 0
        else:  # skip the update, and give up if it keeps happening
            self.progress.bad_steps += 1
            self._consecutive_bad += 1
            logger.warning("non-finite loss at step %d: update skipped", self.progress.step + 1)
            if self._consecutive_bad >= MAX_BAD_STEPS:
                raise TrainingError(
                    f"{MAX_BAD_STEPS} non-finite losses in a row at step {self.progress.step}: "
                    "lower train.lr_scale or raise train.warmup_steps; the last good "
                    f"checkpoint is in {self.store.dir}"
                )
        self.optimizer.zero_grad(set_to_none=True)
        self.progress.step += 1

    def _learning_rate(self, step: int) -> float:
        train = self.config.train
        return learning_rate(step, self.config.model.d_model, train.warmup_steps, train.lr_scale)

    def _should_stop(self) -> bool:
        train = self.config.train
        if self.progress.step >= train.max_steps:
            return True
        if not train.max_minutes:
            return False
        # Clocks differ between processes: all stop when one runs out of time.
        return self.processes.any(self.progress.elapsed >= 60 * train.max_minutes)

    def _collate(self, pairs) -> Batch:
        return collate(pairs, self.vocab.pad, self.vocab.bos, self.vocab.eos).to(self.device)

    def _autocast(self):
        if self.device.type == "cuda" and self.config.train.precision == "auto":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()

    def _no_sync(self, last: bool):
        """Within a group, only the last backward synchronises gradients between processes."""
        if self.processes.parallel and not last:
            return self.network.no_sync()
        return nullcontext()

    # --- validation, checkpoints, logs -----------------------------------------------------

    def _validate_and_save(self) -> None:
        rng = self.processes.gather(_rng_state())  # every process takes part

        def validate_and_save() -> None:
            record = {
                "kind": "valid",
                "step": self.progress.step,
                **dev_loss(self.model, self.data, self.config, self.device, self._autocast),
            }
            if self.config.train.valid_bleu:
                record["bleu"] = dev_bleu(self.model, self.data, self.config, self.device)
            self._log(record)
            score = record.get("bleu", -record["loss"])
            self.store.save(self._state(rng), self.progress.step, score, higher_is_better=True)
            plot_learning_curve(self.log_path, self.run_dir / "curve.png")
            logger.info(
                "step %d: %s",
                self.progress.step,
                ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k != "kind"),
            )

        self._on_main(validate_and_save)

    def _on_main(self, work: Callable[[], None]) -> None:
        """Do `work` in the main process only; if it fails there, every process stops."""
        error = None
        if self.processes.is_main:
            try:
                work()
            except Exception as failure:  # shared below, then raised as it was
                error = failure
        outcome = self.processes.gather(None if error is None else f"{error}")
        if error is not None:
            raise TrainingError(str(error)) if isinstance(error, RunFolderError) else error
        if outcome[0] is not None:
            raise TrainingError(f"the main process failed: {outcome[0]}")

    def _state(self, rng: list) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.progress.step,
            "progress": vars(self.progress).copy(),
            "rng": rng,  # one per process
            "config": self.config.to_json(),
        }

    def _log(self, record: dict) -> None:
        if not self.processes.is_main:
            return
        record.setdefault("step", self.progress.step)
        record["elapsed"] = round(self.progress.elapsed, 2)
        append_log(self.log_path, record)

    def _average(self) -> Path:
        """Average the last `train.average_last` checkpoints (s6.1) into `average.pt`."""
        out = self.run_dir / AVERAGE_FILE

        def write_average() -> None:
            # Checkpoints from the warmup are far from the end point: averaging them in would
            # pull a short run back. Only those after it count; with none, the newest stands.
            train = self.config.train
            steps = [s for s in self.store.steps() if s >= train.warmup_steps]
            paths = [self.store.path(s) for s in steps[-train.average_last :]]
            paths = paths or self.store.last_paths(1)
            save(average(paths), out)
            logger.info("averaged %d checkpoints into %s", len(paths), out)

        self._on_main(write_average)
        return out


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


class _explain_out_of_memory:
    """Turn a GPU out-of-memory error into one that names the settings to change."""

    def __init__(self, config: Config):
        self.config = config

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if kind is not None and issubclass(kind, torch.cuda.OutOfMemoryError):
            data, train = self.config.data, self.config.train
            raise TrainingError(
                f"out of GPU memory with data.max_tokens={data.max_tokens}: lower it and raise "
                f"train.accumulate (now {train.accumulate}) to keep the batch per update"
            ) from error
        return False
