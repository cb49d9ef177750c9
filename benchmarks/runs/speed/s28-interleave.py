"""Session 28's in-process A/B of stacked projections in CPU training (SPEED.md, session 28).

    python benchmarks/runs/speed/s28-interleave.py PRESET UPDATES [key=value ...]

Session 27's loop (s27-interleave.py) with the other switch: blocks of 5 updates alternating one
product per projection and queries, keys and values as one product of the stacked weights
(`attention.STACKED_TRAINING_DEVICES` taking in the CPU). The first 10 untimed.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import transduce.models.attention as attention

sys.path.insert(0, str(Path(__file__).resolve().parent))
interleave = importlib.import_module("s27-interleave").interleave


def stacked(on: bool) -> None:
    attention.STACKED_TRAINING_DEVICES = {"cpu"} if on else set()


if __name__ == "__main__":
    interleave(stacked, labels=("apart", "stacked"))
