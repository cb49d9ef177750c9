"""Session 28's in-process A/B of stacked projections in CPU training (SPEED.md, session 28).

    python benchmarks/runs/speed/s28-interleave.py PRESET UPDATES [key=value ...]

Session 27's script (s27-interleave.py) with the other switch: blocks of 5 updates alternating
one product per projection (0) and queries, keys and values as one product of the stacked
weights (32: `attention.STACKED_TRAINING_DEVICES` taking in the CPU). The first 10 untimed.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from pathlib import Path

import transduce.models.attention as attention
from transduce.config import override
from transduce.data.dataset import PreparedData
from transduce.presets import preset
from transduce.runtime import pick_device
from transduce.training.loop import Trainer

DATA = "/work/bench/data10k"


def main() -> None:
    name, updates = sys.argv[1], int(sys.argv[2])
    settings = dict(item.split("=", 1) for item in sys.argv[3:])
    config = override(preset(name), {"train.threads": "2", **settings})
    with tempfile.TemporaryDirectory() as run:
        data, device = PreparedData.load(DATA), pick_device("cpu")
        trainer = Trainer(config, data, Path(run), resume=False, device=device)
        batches = itertools.chain.from_iterable(
            trainer.epochs.batches(e) for e in itertools.count()
        )
        spent = {0: [0, 0.0], 32: [0, 0.0]}  # stacked (32) or not (0)
        for i, pairs in enumerate(itertools.islice(batches, updates)):
            span = (0, 32)[(i // 5) % 2]
            attention.STACKED_TRAINING_DEVICES = {"cpu"} if span else set()
            start = time.perf_counter()
            tokens = trainer._update([pairs], trainer._rate(0.0)).tgt_tokens
            if i >= 10:
                spent[span][0] += tokens
                spent[span][1] += time.perf_counter() - start
    rates = {span: tokens / seconds for span, (tokens, seconds) in spent.items()}
    print(name, settings, {span: round(rate) for span, rate in rates.items()}, end=" ")
    print(f"ratio 32/0: {rates[32] / rates[0]:.3f}")


if __name__ == "__main__":
    main()
