"""Session 27's in-process A/B of CPU training's explicit-formula span (SPEED.md, session 27).

    python benchmarks/runs/speed/s27-interleave.py PRESET UPDATES [key=value ...]

The Trainer's own update on Multi30k's first UPDATES batches (bench/data10k), blocks of 5
updates alternating `attention.EXPLICIT_TRAINING_SPAN` 0 (the kernel always) and 32: both see
the same mix of batch shapes and the same minutes of the host's drift. The first 10 untimed.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import transduce.models.attention as attention
from transduce.config import override
from transduce.data.dataset import PreparedData
from transduce.presets import preset
from transduce.runtime import pick_device
from transduce.training.loop import Trainer

DATA = "/work/bench/data10k"


@contextmanager
def training(name: str, settings: dict[str, str]) -> Iterator[tuple[Trainer, Iterator[list]]]:
    """The Trainer of preset `name` with `settings` on DATA, 2 threads, in a scratch run
    directory, and its batches epoch after epoch."""
    config = override(preset(name), {"train.threads": "2", **settings})
    with tempfile.TemporaryDirectory() as run:
        data, device = PreparedData.load(DATA), pick_device("cpu")
        trainer = Trainer(config, data, Path(run), resume=False, device=device)
        yield (
            trainer,
            itertools.chain.from_iterable(trainer.epochs.batches(e) for e in itertools.count()),
        )


def interleave(switch: Callable[[bool], None], labels: tuple[str, str] = ("0", "32")) -> None:
    """Blocks of 5 updates with `switch(False)` and `switch(True)` in turn; prints target
    tokens/s of each (under `labels`) and their ratio. PRESET, UPDATES and settings from argv."""
    name, updates = sys.argv[1], int(sys.argv[2])
    settings = dict(item.split("=", 1) for item in sys.argv[3:])
    with training(name, settings) as (trainer, batches):
        spent = {False: [0, 0.0], True: [0, 0.0]}  # switched on: [target tokens, seconds]
        for i, pairs in enumerate(itertools.islice(batches, updates)):
            on = bool((i // 5) % 2)
            switch(on)
            start = time.perf_counter()
            tokens = trainer._update([pairs], trainer._rate(0.0)).tgt_tokens
            if i >= 10:
                spent[on][0] += tokens
                spent[on][1] += time.perf_counter() - start
    rates = {on: tokens / seconds for on, (tokens, seconds) in spent.items()}
    print(name, settings, {labels[on]: round(rate) for on, rate in rates.items()}, end=" ")
    print(f"ratio {labels[1]}/{labels[0]}: {rates[True] / rates[False]:.3f}")


def main() -> None:
    interleave(lambda on: setattr(attention, "EXPLICIT_TRAINING_SPAN", 32 if on else 0))


if __name__ == "__main__":
    main()
