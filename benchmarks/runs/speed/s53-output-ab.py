"""Session 53: the update with the bfloat16 route's outputs raised to float32 and then the bias
added in place (`bf16._output` now), against PyTorch's promoting add of the float32 bias to the
bfloat16 product (session 49's), alternated block by block in one process.

    python benchmarks/runs/speed/s53-output-ab.py PREPARED [PRESET] [ROUNDS]

Two Trainers of the preset as a user gets it (the same seed, so the same batches); before each
block of 10 updates `bf16._output` is set to the version under test. Prints each round's target
tokens/s and their ratio, then the geometric mean and the median of the ratios.
"""

import importlib
import sys
import tempfile
from pathlib import Path

import torch

import transduce.models.bf16 as bf16
from transduce.config import override
from transduce.data.dataset import PreparedData
from transduce.presets import preset
from transduce.runtime import pick_device
from transduce.training.loop import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
alternated = importlib.import_module("s51-adam-ab").alternated  # rounds of blocks, timed alike

NEW_OUTPUT = bf16._output


def session49_output(x_low, weight_low, rows, bias=None):
    """`bf16._output` before session 53: the bias added as the product is raised."""
    product = torch.mm(x_low, weight_low.t())[:rows]
    return product.float() if bias is None else torch.add(product, bias)


def main() -> None:
    prepared, name = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "small"
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    config = override(preset(name), {"train.threads": "2"})
    data, device = PreparedData.load(prepared), pick_device("cpu")
    outputs = {"new": NEW_OUTPUT, "old": session49_output}
    with tempfile.TemporaryDirectory() as run:
        trainers = {
            label: Trainer(config, data, Path(run) / label, False, device) for label in outputs
        }
        ratios = []

        def switch(label: str) -> None:
            bf16._output = outputs[label]

        for r, rates in enumerate(alternated(trainers, rounds, before=switch), start=1):
            ratios.append(rates["new"] / rates["old"])
            print(
                f"round {r}: new {rates['new']:,.0f}, session 49 {rates['old']:,.0f} "
                f"target tokens/s, {ratios[-1]:.3f}x",
                flush=True,
            )
        ratio = torch.tensor(ratios)
        print(
            f"geometric mean {ratio.log().mean().exp().item():.3f}x, median "
            f"{ratio.median().item():.3f}x, new ahead in {int((ratio > 1).sum())} of {rounds}"
        )


if __name__ == "__main__":
    main()
