"""The shapes of an epoch's token-bucketed batches at WMT14 en-de's lengths, no model run.

    python benchmarks/batch_shapes.py [--pairs 4500000] [--max-tokens 25000]

For each way of cutting (mixed source lengths, one source length): the number of batches, those
holding under half the budget, under 5,120 source tokens (Inductor's fusion threshold on a GPU,
SPEED.md session 37) or a single sentence, the batches whose sources are padded, and the padding
of each side. Lengths from wmt_lengths.py (synthetic, seeded).
"""

from __future__ import annotations

import argparse

import numpy as np
from wmt_lengths import lengths

from transduce.data.batching import TokenBatchSampler


def shapes(src: np.ndarray, tgt: np.ndarray, max_tokens: int, one_source_length: bool) -> dict:
    sampler = TokenBatchSampler(
        src, tgt, max_tokens=max_tokens, one_source_length=one_source_length, warn_skipped=False
    )
    batches = sampler.batches(0)
    sources = [sampler.src[b] for b in batches]
    targets = [sampler.tgt[b] for b in batches]
    padded_tokens = [max(s.max(), t.max()) * len(s) for s, t in zip(sources, targets, strict=True)]
    return {
        "batches": len(batches),
        "under half the budget": sum(2 * n < max_tokens for n in padded_tokens),
        "under 5,120 source tokens": sum(s.max() * len(s) < 5120 for s in sources),
        "single sentence": sum(len(s) == 1 for s in sources),
        "sources padded": sum(s.min() != s.max() for s in sources),
        "source padding": padding(sources),
        "target padding": padding(targets),
    }


def padding(sides: list[np.ndarray]) -> float:
    """The share of one side's batched positions that are padding."""
    return 1 - sum(side.sum() for side in sides) / sum(side.max() * len(side) for side in sides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4_500_000)
    parser.add_argument("--max-tokens", type=int, default=25000)
    args = parser.parse_args()
    src, tgt = lengths(args.pairs, np.random.default_rng(1))
    for one in (False, True):
        row = shapes(src, tgt, args.max_tokens, one)
        print(f"{'one source length' if one else 'mixed lengths':19s}", end="")
        cells = (f"{k} {v:.2%}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())
        print("  ".join(cells))


if __name__ == "__main__":
    main()
