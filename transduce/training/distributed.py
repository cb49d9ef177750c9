"""Data-parallel training across processes (the paper's 8 devices), with PyTorch's own engine.

`torchrun --nproc_per_node K -m transduce train ...` starts K processes; each reads its rank from
the environment, takes every K-th batch, and DistributedDataParallel sums their gradients. One
update then sees the same batches as a single process with K times the accumulation.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


class MainProcessFailed(RuntimeError):
    """What the other processes raise when work that only the main one does failed there."""


@dataclass(frozen=True)
class Processes:
    """This process's place among the training processes."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Only the main process validates, logs and writes checkpoints."""
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.world > 1

    def sum(self, values: list[float]) -> list[float]:
        """The sum over processes of each value (identity for one process)."""
        if not self.parallel:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=_collective_device())
        dist.all_reduce(tensor)
        return tensor.tolist()

    def max(self, value: float) -> float:
        """The largest `value` over processes (itself for one process)."""
        if not self.parallel:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=_collective_device())
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tensor.item()

    def gather(self, value: object) -> list[object]:
        """Each process's `value`, indexed by rank."""
        if not self.parallel:
            return [value]
        values: list[object] = [None] * self.world
        dist.all_gather_object(values, value)
        return values

    def on_main(self, work: Callable[[], T]) -> T | None:
        """`work` done in the main process only: its result there, None in the others. If it
        fails, every process stops: the main one with its error, the others naming it."""
        error, result = None, None
        if self.is_main:
            try:
                result = work()
            except Exception as failure:  # shared below, then raised as it was
                error = failure
        outcome = self.gather(None if error is None else f"{error}")
        if error is not None:
            raise error
        if outcome[0] is not None:
            raise MainProcessFailed(f"the main process failed: {outcome[0]}")
        return result

    def barrier(self) -> None:
        if self.parallel:
            dist.barrier()


def start(device_type: str) -> Processes:
    """Join the process group torchrun describes in the environment; one process without it."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Processes()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        # NCCL between GPUs; gloo between CPU processes.
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    return Processes(rank, world, local_rank)


def stop() -> None:
    """Leave the process group, once nothing of the run holds it.

    DistributedDataParallel keeps the group, and gloo's threads, alive. A Trainer left in a
    reference cycle (torch's first imports make one, through the frames that built it) would be
    freed only at the interpreter's exit, where those threads can abort the process ("terminate
    called without an active exception"): collect it while everything is alive."""
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def _collective_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
