"""One update (s5.3, s5.4): forward, label-smoothed loss, backward over a group of batches, then
clipping and the optimiser step, or no step at all when the loss is not finite."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from ..config import Config
from ..data.batching import Batch
from .distributed import Processes
from .loss import model_loss
from .rdrop import rdrop_loss
from .schedule import set_learning_rate


class TrainingError(RuntimeError):
    """Training cannot go on; the message says why and what to change."""


@dataclass
class StepResult:
    """What one update saw, summed over every process."""

    loss: float  # label-smoothed, per target token: what the update minimised
    nll: float  # per target token, for perplexity
    tgt_tokens: int
    src_tokens: int  # approximately under several processes: this one's times their number
    finite: bool  # False: the loss was not finite, and the parameters were left as they were


def train_step(
    network: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: list[Batch],
    *,
    rate: float,
    label_smoothing: float,
    pad: int,
    clip_norm: float = 0.0,
    processes: Processes | None = None,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    fused_loss: bool = False,
    rdrop: float = 0.0,
) -> StepResult:
    """One optimiser step at learning rate `rate` over `batches` (the accumulated group).

    The gradient is that of the loss per target token of the whole group, in all processes:
    every batch's summed loss is divided by the group's token count before its backward.
    `network` is the model or its DistributedDataParallel wrapper; `fused_loss` takes the loss's
    compiled sums (training/compiled.py); `rdrop` > 0 passes each batch twice (training/rdrop.py).
    """
    processes = processes or Processes()
    network.train()
    (n_tokens,) = processes.sum([sum(b.n_tgt_tokens for b in batches)])
    readings = []
    for i, batch in enumerate(batches):
        # DDP averages gradients over processes at the last backward of the group;
        # scaling by `world` turns that average into the sum over all the group's tokens.
        with _no_sync(network, processes, last=i == len(batches) - 1), autocast():
            if rdrop > 0:
                sums = rdrop_loss(network, batch, label_smoothing, pad, rdrop)
            else:
                sums = model_loss(network, batch, label_smoothing, pad, fused_loss)
            readings.append(_HostReading(torch.stack([sums.loss, sums.nll]).detach()))
            (sums.loss * processes.world / n_tokens).backward()
    # Read once every backward is queued: a GPU works through them while the host waits
    # for the forwards' sums, so it never idles for want of work (benchmarks/SPEED.md, GPU).
    sums_read = [reading.values() for reading in readings]  # [loss, nll] of each batch
    loss_sum, nll_sum = processes.sum([sum(s[0] for s in sums_read), sum(s[1] for s in sums_read)])
    finite = math.isfinite(loss_sum)
    if finite:  # a non-finite loss would turn every parameter into NaN: skip the update
        set_learning_rate(optimizer, rate)
        if clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(network.parameters(), clip_norm)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepResult(
        loss=loss_sum / n_tokens,
        nll=nll_sum / n_tokens,
        tgt_tokens=int(n_tokens),
        src_tokens=sum(b.n_src_tokens for b in batches) * processes.world,
        finite=finite,
    )


class _HostReading:
    """A few numbers of a device tensor, copied to the host when the tensor is ready.

    On a GPU the copy is queued behind the work that makes the tensor, and only `values` waits,
    for that copy alone: `.item()` would wait for everything queued since, the backward too.
    """

    def __init__(self, tensor: torch.Tensor):
        self.host, self.ready = tensor, None
        if tensor.device.type == "cuda":
            self.host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            self.host.copy_(tensor, non_blocking=True)
            self.ready = torch.cuda.Event()
            self.ready.record()

    def values(self) -> list[float]:
        if self.ready is not None:
            self.ready.synchronize()
        return self.host.tolist()


def _no_sync(network: nn.Module, processes: Processes, last: bool) -> AbstractContextManager:
    """Within a group, only the last backward synchronises gradients between processes."""
    if processes.parallel and not last:
        return network.no_sync()
    return nullcontext()


@contextmanager
def explain_out_of_memory(config: Config) -> Iterator[None]:
    """Turn a GPU out-of-memory error into one that names the settings to change."""
    try:
        yield
    except torch.cuda.OutOfMemoryError as error:
        data, train = config.data, config.train
        raise TrainingError(
            f"out of GPU memory with data.max_tokens={data.max_tokens}: lower it and raise "
            f"train.accumulate (now {train.accumulate}) to keep the batch per update"
        ) from error
