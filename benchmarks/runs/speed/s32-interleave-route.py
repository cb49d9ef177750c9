"""Session 32's in-process A/B of training's float32 product route on the CPU (SPEED.md).

    python benchmarks/runs/speed/s32-interleave-route.py PRESET UPDATES BLOCK [key=value ...]

The Trainer's own update on Multi30k's first UPDATES batches (s27-interleave.py's `training`),
in blocks of BLOCK updates alternating MKL (torch's `F.linear`, forward and backward) and oneDNN
(`matmul.use_onednn`): both meet the same mix of batch shapes and the same minutes of the host's
drift. The first 10 updates untimed. Prints target tokens/s of each route, their ratio, and the
median ratio of neighbouring blocks (the drift within a pair is smaller than across the run).
"""

from __future__ import annotations

import importlib
import itertools
import statistics
import sys
import time
from pathlib import Path

from transduce.models import matmul

sys.path.insert(0, str(Path(__file__).resolve().parent))
training = importlib.import_module("s27-interleave").training


def main() -> None:
    name, updates, block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    settings = dict(item.split("=", 1) for item in sys.argv[4:])
    with training(name, settings) as (trainer, batches):
        blocks: list[list[float]] = []  # [route on oneDNN, target tokens, seconds] per block
        for i, pairs in enumerate(itertools.islice(batches, updates + 10)):
            onednn = i >= 10 and ((i - 10) // block) % 2 == 1
            matmul.use_onednn(onednn)
            start = time.perf_counter()
            tokens = trainer._update([pairs], trainer._rate(0.0)).tgt_tokens
            if i < 10:
                continue
            if (i - 10) % block == 0:
                blocks.append([onednn, 0, 0.0])
            blocks[-1][1] += tokens
            blocks[-1][2] += time.perf_counter() - start
    rate = {}
    for route in (False, True):
        mine = [b for b in blocks if b[0] == route]
        rate[route] = sum(b[1] for b in mine) / sum(b[2] for b in mine)
    whole = blocks[: len(blocks) // 2 * 2]  # (MKL, oneDNN) pairs
    pairs_ratio = [
        (b[1] / b[2]) / (a[1] / a[2]) for a, b in zip(whole[::2], whole[1::2], strict=True)
    ]
    print(
        f"{name} {settings} block {block}: MKL {rate[False]:.0f}, oneDNN {rate[True]:.0f}"
        f" target tokens/s; oneDNN/MKL {rate[True] / rate[False]:.3f}, median of"
        f" {len(pairs_ratio)} neighbouring pairs {statistics.median(pairs_ratio):.3f}"
    )


if __name__ == "__main__":
    main()
