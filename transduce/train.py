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
from .curves import plot_learning_curve, read_log
from .dataset import PreparedData
from .loss import label_smoothed_loss
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
        return trainer.run()
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
        if self.processes.is_main:
            _check_writable(self.run_dir)
            _check_same_run(self.run_dir, config, resume)
            (self.run_dir / "config.json").write_text(config.to_json())
            shutil.copyfile(self.data.path / "vocab.model", self.run_dir / "vocab.model")
            (self.run_dir / "data.json").write_text(json.dumps(self.data.meta, indent=2))
        self.processes.barrier()
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
        return sampler.shard(self.processes.rank, self.processes.world)

    def _restore(self) -> None:
        state = self.store.load_latest()
        if state is None:
            logger.info("nothing to resume in %s: starting afresh", self.run_dir)
            return
        if state["progress"]["world"] != self.processes.world:
            raise TrainingError(
                f"{self.run_dir} was trained by {state['progress']['world']} process(es); "
                f"resume it with as many, not {self.processes.world}"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.progress = Progress(**state["progress"])
        rng = state["rng"][self.processes.rank]
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        if torch.cuda.is_available() and "cuda" in rng:
            torch.cuda.set_rng_state_all(rng["cuda"])
        if self.processes.is_main:  # forget what a killed session logged after its checkpoint
            kept = [r for r in read_log(self.log_path) if r["step"] <= self.progress.step]
            self.log_path.write_text("".join(json.dumps(r) + "\n" for r in kept))
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
        last_saved, window = self.progress.step, _Window()
        for group in self._update_groups():
            stats = self._update(group)
            self.progress.elapsed = elapsed_before + time.monotonic() - session_start
            window.add(stats)
            bar.update(1)
            bar.set_postfix(
                loss=f"{stats['loss']:.3f}",
                lr=f"{stats['lr']:.2e}",
                tok_s=f"{window.tokens_per_second():.0f}",
            )
            if self.progress.step % train.log_every == 0:
                self._log({"kind": "train", **window.summary(), "lr": stats["lr"]})
                window = _Window()
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
        while True:
            epoch = self.progress.epoch
            for indices in self.sampler.iterate(epoch, self.progress.batch_in_epoch):
                self.progress.batch_in_epoch += 1
                group.append(indices)
                if len(group) == self.config.train.accumulate:
                    yield group
                    group = []
            self.progress.epoch, self.progress.batch_in_epoch = epoch + 1, 0
            if self.config.train.max_epochs and self.progress.epoch >= self.config.train.max_epochs:
                return

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
        if self.processes.is_main:
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
        self.processes.barrier()

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
        with self.log_path.open("a") as log:
            log.write(json.dumps(record) + "\n")

    def _average(self) -> Path:
        """Average the last `train.average_last` checkpoints (s6.1) into `average.pt`."""
        out = self.run_dir / AVERAGE_FILE
        if self.processes.is_main:
            paths = self.store.last_paths(self.config.train.average_last)
            save(average(paths), out)
            logger.info("averaged %d checkpoints into %s", len(paths), out)
        self.processes.barrier()
        return out


class _Window:
    """Loss and throughput over the updates since the last log line."""

    def __init__(self) -> None:
        self.loss = self.nll = 0.0
        self.tgt_tokens = self.src_tokens = self.updates = 0
        self.restart_clock()

    def restart_clock(self) -> None:
        """Throughput counts from here: validation time is not training time."""
        self.start, self.timed_tokens = time.monotonic(), 0

    def add(self, stats: dict) -> None:
        self.loss += stats["loss"] * stats["tgt_tokens"]
        self.nll += stats["nll"] * stats["tgt_tokens"]
        self.tgt_tokens += stats["tgt_tokens"]
        self.timed_tokens += stats["tgt_tokens"]
        self.src_tokens += stats["src_tokens"]
        self.updates += 1

    def tokens_per_second(self) -> float:
        return self.timed_tokens / max(time.monotonic() - self.start, 1e-9)

    def summary(self) -> dict:
        n = max(self.tgt_tokens, 1)
        return {
            "loss": self.loss / n,
            "nll": self.nll / n,
            "tgt_tokens_per_s": round(self.tokens_per_second(), 1),
            "updates": self.updates,
        }


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


def _check_same_run(run_dir: Path, config: Config, resume: bool) -> None:
    """On resume only when to stop may change; without resume the folder must hold no run."""
    saved = run_dir / "config.json"
    if resume and saved.exists():
        previous = Config.load(saved)
        limits = ("max_steps", "max_epochs", "max_minutes")
        same = replace(previous.train, **{k: getattr(config.train, k) for k in limits})
        if replace(previous, train=same) != config:
            raise TrainingError(
                f"{saved}: --resume with a different configuration; only train.max_steps, "
                "max_epochs and max_minutes may change"
            )
    elif not resume and (run_dir / "checkpoints").exists():
        raise TrainingError(f"{run_dir} already holds a run: pass --resume or a new --out")


def _check_writable(run_dir: Path) -> None:
    """Refuse before training, not after an hour, when checkpoints could not be written."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_bytes(b"x" * 1024)
        probe.unlink()
    except OSError as error:
        raise TrainingError(f"cannot write to the run folder {run_dir}: {error}") from error
    free = shutil.disk_usage(run_dir).free
    if free < 100 * 2**20:
        raise TrainingError(f"{run_dir}: only {free // 2**20} MiB free; checkpoints need more")
