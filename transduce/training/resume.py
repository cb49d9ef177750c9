"""What a checkpoint holds besides the weights so that `--resume` continues exactly: where the run
stands (`Progress`) and every process's random state, captured and restored here.

The data needs no state of its own: each epoch's batches are a pure function of (seed, epoch),
so `Progress.epoch` and `batch_in_epoch` put it back where it was, and `Progress.batches` (the
epoch's fingerprint) tells when they do not: another version's batching, or BPE-dropout's
segmentation met again by a new process (data/epochs.py).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from ..data.epochs import Pairs, TrainingEpochs

logger = logging.getLogger(__name__)


@dataclass
class Progress:
    """Where a run stands: saved in every checkpoint, restored on resume."""

    step: int = 0  # updates done
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` this process has used
    batches: str = ""  # the fingerprint of `epoch`'s batches (TokenBatchSampler.fingerprint)
    elapsed: float = 0.0  # seconds of training, summed over resumed sessions
    bad_steps: int = 0  # updates skipped for a non-finite loss, in total
    world: int = 1  # training processes; a resumed run must use as many
    both_ways_epochs: int = 0  # the first epochs, trained on the pairs both ways (train.both_ways)

    @classmethod
    def from_state(cls, saved: dict) -> Progress:
        return cls(**{"world": 1, **saved})  # checkpoints from before `world` was saved: one


def capture_rng() -> dict:
    """This process's random state: torch's CPU generator (dropout), Python's, and CUDA's."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(saved: dict | list[dict], rank: int) -> None:
    """Put back the state `capture_rng` took in process `rank` (a list holds one per process)."""
    state = saved[rank] if isinstance(saved, list) else saved
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if torch.cuda.is_available() and "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


def update_groups(
    epochs: TrainingEpochs,
    progress: Progress,
    accumulate: int,
    max_epochs: int,
    starting: Callable[[int], None] = lambda epoch: None,
) -> Iterator[list[Pairs]]:
    """Groups of `accumulate` batches, epoch after epoch, from where `progress` stands; it
    counts each batch as handed out, so that a checkpoint between updates knows where to go on.
    `starting(epoch)` is called as each epoch begins or resumes, before its batches are drawn."""
    group: list[Pairs] = []
    while not (max_epochs and progress.epoch >= max_epochs):
        epoch = progress.epoch
        starting(epoch)
        fingerprint = epochs.fingerprint(epoch)
        _check_batches(epochs, progress, fingerprint)
        progress.batches = fingerprint
        for pairs in epochs.batches(epoch, progress.batch_in_epoch):
            progress.batch_in_epoch += 1
            group.append(pairs)
            if len(group) == accumulate:
                yield group
                group = []
        progress.epoch, progress.batch_in_epoch = epoch + 1, 0


def _check_batches(epochs: TrainingEpochs, progress: Progress, fingerprint: str) -> None:
    """Warn when a run resumed mid-epoch meets other batches for that epoch (`fingerprint`) than
    it was cut with (another version's batching, say): the rest of the epoch then repeats some
    examples and leaves out others. Later epochs are whole either way."""
    if not (progress.batches and progress.batch_in_epoch):
        return
    if progress.batches != fingerprint:
        logger.warning(
            "epoch %d's batches differ from those this run was cut with (the batching or the "
            "data changed since its checkpoint): the rest of epoch %d may repeat some examples "
            "and miss others; from epoch %d on, every example once an epoch again",
            progress.epoch,
            progress.epoch,
            progress.epoch + 1,
        )
        # Fewer batches than were used: the epoch is over.
        progress.batch_in_epoch = min(progress.batch_in_epoch, epochs.num_batches(progress.epoch))
