"""Session 29's in-process A/B of attention without a source mask in CPU training (SPEED.md).

    python benchmarks/runs/speed/s29-interleave.py PRESET UPDATES [key=value ...]

Session 27's loop (s27-interleave.py) with the other switch: blocks of 5 updates alternating the
source mask always given and left out for batches whose sources are all one length
(`loss.MASK_FREE_DEVICES` taking in the CPU or not). The first 10 untimed.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import transduce.training.loss as loss

sys.path.insert(0, str(Path(__file__).resolve().parent))
interleave = importlib.import_module("s27-interleave").interleave


def mask_free(on: bool) -> None:
    loss.MASK_FREE_DEVICES = {"cpu"} if on else set()


if __name__ == "__main__":
    interleave(mask_free, labels=("masked", "mask-free"))
