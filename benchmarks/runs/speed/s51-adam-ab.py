"""Session 51: the update with PyTorch's fused Adam against its default (parameter by parameter)
on a CPU, alternated block by block in one process, so that the host's changing speed falls on
both alike.

    python benchmarks/runs/speed/s51-adam-ab.py PREPARED [PRESET] [ROUNDS]

Two Trainers of the preset as a user gets it (the same seed, so the same batches), one given the
default Adam; each round runs 10 updates of each in turn (after 20 of each to warm up) and prints
their target tokens/s, and at the end the optimizer steps alone, timed alike.
"""

import itertools
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from transduce.config import override
from transduce.data.dataset import PreparedData
from transduce.presets import preset
from transduce.runtime import pick_device
from transduce.training.loop import Trainer


def main() -> None:
    prepared, name = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "small"
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    config = override(preset(name), {"train.threads": "2"})
    data, device = PreparedData.load(prepared), pick_device("cpu")
    with tempfile.TemporaryDirectory() as run:
        fused = Trainer(config, data, Path(run) / "fused", False, device)
        default = Trainer(config, data, Path(run) / "default", False, device)
        # as before session 51 on a CPU: `fused=None`, PyTorch's default there
        default.optimizer = torch.optim.Adam(
            default.model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9, fused=None
        )
        print(
            f"{name}: fused {fused.optimizer.defaults['fused']}, "
            f"default {default.optimizer.defaults['fused']}"
        )
        trainers = {"fused": fused, "default": default}
        for r, rates in enumerate(alternated(trainers, rounds), start=1):
            print(
                f"round {r}: fused {rates['fused']:,.0f}, default {rates['default']:,.0f} "
                f"target tokens/s, {rates['fused'] / rates['default']:.3f}x"
            )
        for label, trainer in (("fused", fused), ("default", default)):
            for parameter in trainer.model.parameters():  # the last update set them to None
                parameter.grad = torch.randn_like(parameter) * 1e-3
            times = []
            for _ in range(20):
                start = time.perf_counter()
                trainer.optimizer.step()
                times.append(time.perf_counter() - start)
            print(f"{label} Adam step alone: {sorted(times)[10] * 1e3:.1f} ms (median of 20)")


def alternated(
    trainers: dict[str, Trainer], rounds: int, before: Callable[[str], None] | None = None
) -> Iterator[dict[str, float]]:
    """Each round's target tokens/s by label: 10 updates of each Trainer in turn on the same
    batches (the first Trainer's), after 20 of each to warm up. `before(label)` runs before each
    of that label's blocks (to set a module-level switch, say)."""
    first = next(iter(trainers.values()))
    batches = itertools.chain.from_iterable(first.epochs.batches(e) for e in itertools.count())
    blocks = [list(itertools.islice(batches, 10)) for _ in range(2 + rounds)]

    def timed(label: str, block: list) -> float:
        if before is not None:
            before(label)
        return _timed(trainers[label], block)

    for label in trainers:
        for block in blocks[:2]:
            timed(label, block)
    for block in blocks[2:]:
        yield {label: timed(label, block) for label in trainers}


def _timed(trainer: Trainer, block: list) -> float:
    tokens, start = 0, time.perf_counter()
    for pairs in block:
        tokens += trainer._update([pairs], 1e-4).tgt_tokens
    return tokens / (time.perf_counter() - start)


if __name__ == "__main__":
    main()
