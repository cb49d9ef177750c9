"""Session 52: the update with dropout's mask drawn by numpy's SFC64 and applied as a product
(the residual sum in the same `addcmul`), against session 10's (torch's 64-bit draws, a bool mask
applied with `masked_fill`, then the scaling, then the residual sum), alternated block by block in
one process, so that the host's changing speed falls on both alike.

    python benchmarks/runs/speed/s52-dropout-ab.py PREPARED [PRESET] [ROUNDS] [SET ...]

Two Trainers of the preset as a user gets it (the same seed, so the same batches), the second's
`Dropout` modules given session 10's code (below, as it was); each round runs 10 updates of each
in turn (after 20 of each to warm up) and prints their target tokens/s. SET: `key=value`
settings, e.g. model.dropout=0.1 for the demo's rate.
"""

import importlib
import sys
import tempfile
from pathlib import Path

import torch

from transduce.config import override
from transduce.data.dataset import PreparedData
from transduce.models.dropout import LEVELS, Dropout
from transduce.presets import preset
from transduce.runtime import pick_device
from transduce.training.loop import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
alternated = importlib.import_module("s51-adam-ab").alternated  # rounds of blocks, timed alike


class Session10Dropout(Dropout):
    """models/dropout.py before session 52 (CPU, 0 < p < 1)."""

    def forward(self, x, residual=None):
        levels_dropped = round(self.p * LEVELS)
        if self.training and levels_dropped:
            with torch.no_grad():
                draws = torch.empty((x.numel() + 3) // 4, dtype=torch.int64)
                draws.random_(-(1 << 63), None)
                integers = draws.view(torch.int16)[: x.numel()].view(x.shape)
                dropped = integers < levels_dropped - LEVELS // 2
            x = x.masked_fill(dropped, 0.0) * (LEVELS / (LEVELS - levels_dropped))
        return x if residual is None else residual + x


def main() -> None:
    prepared, name = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "small"
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    settings = dict(item.split("=", 1) for item in sys.argv[4:])
    config = override(preset(name), {"train.threads": "2", **settings})
    data, device = PreparedData.load(prepared), pick_device("cpu")
    with tempfile.TemporaryDirectory() as run:
        new = Trainer(config, data, Path(run) / "new", False, device)
        old = Trainer(config, data, Path(run) / "old", False, device)
        sites = [m for m in old.model.modules() if isinstance(m, Dropout)]
        for module in sites:
            module.__class__ = Session10Dropout
        rates = sorted({m.p for m in sites})
        print(f"{name} {settings}: {len(sites)} dropout sites, rates {rates}")
        ratios = []
        for r, rates in enumerate(alternated({"new": new, "old": old}, rounds), start=1):
            ratios.append(rates["new"] / rates["old"])
            print(
                f"round {r}: new {rates['new']:,.0f}, session 10 {rates['old']:,.0f} "
                f"target tokens/s, {ratios[-1]:.3f}x"
            )
        geometric = torch.tensor(ratios).log().mean().exp().item()
        print(f"geometric mean {geometric:.3f}x over {rounds} rounds")


if __name__ == "__main__":
    main()
