"""The training loop (s5): token batches, accumulation, eq. 3, validation, checkpoints, logs.

A run lives in one folder: `config.json` (the resolved Config), `vocab.model`, `log.jsonl`,
`curve.png`, `checkpoints/` (the last K and the best) and, at the end, `average.pt`.
`resume=True` continues from the newest good checkpoint with the same data order, schedule and
random state, so a resumed run ends where an uninterrupted one would.
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
from tqdm import tqdm

from .batching import Batch, TokenBatchSampler, collate
from .checkpoint import CheckpointStore, average, save
from .config import Config
from .curves import plot_learning_curve, read_log
from .dataset import PreparedData
from .loss import label_smoothed_loss
from .metrics import bleu
from .runtime import pick_device
from .schedule import learning_rate, make_optimizer, set_learning_rate
from .transformer import Transformer, count_parameters
from .translate import AVERAGE_FILE, decode_ids

logger = logging.getLogger(__name__)

MAX_BAD_STEPS = 20  # consecutive non-finite losses before a run gives up


class TrainingError(RuntimeError):
    """Training cannot go on; the message says why and what to change."""


@dataclass
class Progress:
    """Where a run stands: saved in every checkpoint, restored on resume."""

    step: int = 0  # updates done
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` already used
    elapsed: float = 0.0  # seconds of training, summed over resumed sessions
    bad_steps: int = 0  # updates skipped for a non-finite loss, in total


def train(
    config: Config,
    data_dir: Path,
    run_dir: Path,
    *,
    resume: bool = False,
    device: str | None = None,
) -> Path:
    """Train on a prepared dataset into `run_dir`; returns the path of the final averaged model."""
    trainer = Trainer(
        config, PreparedData.load(data_dir), Path(run_dir), resume, pick_device(device)
    )
    return trainer.run()


class Trainer:
    def __init__(
        self, config: Config, data: PreparedData, run_dir: Path, resume: bool, device: torch.device
    ):
        self.data, self.run_dir, self.device = data, run_dir, device
        self.config = self._resolve_config(config, resume)
        if self.config.train.threads:
            torch.set_num_threads(self.config.train.threads)
        self.vocab = data.vocab
        torch.manual_seed(self.config.train.seed)
        random.seed(self.config.train.seed)
        self.model = Transformer(self.config.model, pad=self.vocab.pad).to(device)
        self.optimizer = make_optimizer(
            self.model.parameters(), self.config.train, fused=device.type == "cuda"
        )
        train_split = data.split("train")
        self.sampler = TokenBatchSampler(
            train_split.src_lengths,
            train_split.tgt_lengths,
            max_tokens=self.config.data.max_tokens,
            bucket_width=self.config.data.bucket_width,
            seed=self.config.train.seed,
        )
        self.store = CheckpointStore(run_dir, self.config.train.keep_last)
        self.progress = Progress()
        self.log_path = run_dir / "log.jsonl"
        if resume:
            self._restore()
        logger.info("model: %s parameters; device %s", f"{count_parameters(self.model):,}", device)

    # --- setup ----------------------------------------------------------------------------

    def _resolve_config(self, config: Config, resume: bool) -> Config:
        """Fix the vocabulary size, check the folder, write (or on resume compare) config.json."""
        config = replace(config, model=replace(config.model, vocab_size=self.data.vocab.size))
        _check_writable(self.run_dir)
        saved = self.run_dir / "config.json"
        if resume and saved.exists():
            previous = Config.load(saved)
            # Only when to stop may change on resume; anything else would be a different run.
            limits = ("max_steps", "max_epochs", "max_minutes")
            same = replace(previous.train, **{k: getattr(config.train, k) for k in limits})
            if replace(previous, train=same) != config:
                raise TrainingError(
                    f"{saved}: --resume with a different configuration; only train.max_steps, "
                    "max_epochs and max_minutes may change"
                )
        elif not resume and (self.run_dir / "checkpoints").exists():
            raise TrainingError(f"{self.run_dir} already holds a run: pass --resume or a new --out")
        saved.write_text(config.to_json())
        shutil.copyfile(self.data.path / "vocab.model", self.run_dir / "vocab.model")
        (self.run_dir / "data.json").write_text(json.dumps(self.data.meta, indent=2))
        return config

    def _restore(self) -> None:
        state = self.store.load_latest()
        if state is None:
            logger.info("nothing to resume in %s: starting afresh", self.run_dir)
            return
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.progress = Progress(**state["progress"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        if torch.cuda.is_available() and "cuda" in state["rng"]:
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        # Forget what a killed session logged after its last checkpoint: it will be redone.
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
            disable=None,
            dynamic_ncols=True,
        )
        session_start, last_step_saved = time.monotonic(), self.progress.step
        elapsed_before = self.progress.elapsed
        window = _Window()
        for batches in self._update_groups():
            stats = self._update(batches)
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
                last_step_saved = self.progress.step
                window.restart_clock()  # tokens/s measures training, not validation
            if self._should_stop():
                break
        bar.close()
        if self.progress.step != last_step_saved:
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
        """One optimiser step over a group of batches; the loss is per target token of them all."""
        self.model.train()
        split = self.data.split("train")
        batches = [self._collate(split.pairs(indices)) for indices in group]
        n_tokens = sum(b.n_tgt_tokens for b in batches)
        loss_sum = nll_sum = 0.0
        for batch in batches:
            with self._autocast():
                logits = self.model(batch.src, batch.tgt_in)
            sums = label_smoothed_loss(
                logits, batch.tgt_out, self.config.train.label_smoothing, self.vocab.pad
            )
            (sums.loss / n_tokens).backward()
            loss_sum, nll_sum = loss_sum + sums.loss.item(), nll_sum + sums.nll.item()
        rate = self._learning_rate(self.progress.step + 1)
        self._optimizer_step(rate, finite=math.isfinite(loss_sum))
        return {
            "loss": loss_sum / n_tokens,
            "nll": nll_sum / n_tokens,
            "lr": rate,
            "tgt_tokens": n_tokens,
            "src_tokens": sum(b.n_src_tokens for b in batches),
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
            self._consecutive_bad = getattr(self, "_consecutive_bad", 0) + 1
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
        return bool(train.max_minutes) and self.progress.elapsed >= 60 * train.max_minutes

    def _collate(self, pairs) -> Batch:
        return collate(pairs, self.vocab.pad, self.vocab.bos, self.vocab.eos).to(self.device)

    def _autocast(self):
        if self.device.type == "cuda" and self.config.train.precision == "auto":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()

    # --- validation, checkpoints, logs -----------------------------------------------------

    @torch.no_grad()
    def _validate_and_save(self) -> None:
        record = {"kind": "valid", "step": self.progress.step, **self._dev_loss()}
        if self.config.train.valid_bleu:
            record["bleu"] = self._dev_bleu()
        self._log(record)
        score = record.get("bleu", -record["loss"])
        self.store.save(self._state(), self.progress.step, score, higher_is_better=True)
        plot_learning_curve(self.log_path, self.run_dir / "curve.png")
        logger.info(
            "step %d: %s",
            self.progress.step,
            ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k != "kind"),
        )

    def _dev_loss(self) -> dict:
        self.model.eval()
        split = self.data.split("dev")
        sampler = TokenBatchSampler(
            split.src_lengths,
            split.tgt_lengths,
            max_tokens=self.config.data.max_tokens,
            shuffle=False,
        )
        loss = nll = n_tokens = 0.0
        for indices in sampler.batches(0):
            batch = self._collate(split.pairs(indices))
            with self._autocast():
                logits = self.model(batch.src, batch.tgt_in)
            sums = label_smoothed_loss(
                logits, batch.tgt_out, self.config.train.label_smoothing, self.vocab.pad
            )
            loss, nll, n_tokens = (
                loss + sums.loss.item(),
                nll + sums.nll.item(),
                n_tokens + sums.n_tokens,
            )
        return {"loss": loss / n_tokens, "nll": nll / n_tokens, "ppl": math.exp(nll / n_tokens)}

    def _dev_bleu(self) -> float:
        split, text = self.data.split("dev"), self.data.text("dev")
        sources = [split.pair(i)[0].tolist() for i in range(len(split))]
        decode = replace(self.config.decode, beam_size=self.config.train.valid_beam, n_best=1)
        hypotheses = decode_ids(self.model, self.vocab, sources, decode, self.device)
        outputs = self.vocab.decode([h[0].tokens for h in hypotheses])
        references = [text.tgt[i] for i in split.index]
        # Pre-tokenized data is scored as published results on it are: lowercased, tokenized.
        tokenized = self.data.meta.get("description", {}).get("variant") == "tok"
        return bleu(outputs, references, lowercase_tokenized=tokenized).score

    def _state(self) -> dict:
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.progress.step,
            "progress": vars(self.progress).copy(),
            "rng": rng,
            "config": self.config.to_json(),
        }

    def _log(self, record: dict) -> None:
        record.setdefault("step", self.progress.step)
        record["elapsed"] = round(self.progress.elapsed, 2)
        with self.log_path.open("a") as log:
            log.write(json.dumps(record) + "\n")

    def _average(self) -> Path:
        """Average the last `train.average_last` checkpoints (s6.1) into `average.pt`."""
        paths = self.store.last_paths(self.config.train.average_last)
        out = self.run_dir / AVERAGE_FILE
        save(average(paths), out)
        logger.info("averaged %d checkpoints into %s", len(paths), out)
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
