"""Reranking the beam's n best with a model of the reverse direction (`Translator.score`).

Each candidate y of source x is ranked by  score(y | x) + w * log P(x | y):  the forward model's
own beam score (log-probability over the length penalty) plus the reverse model's log-probability
of the source given the candidate, the channel model of Yee et al. (2019) without their language
model. P(x | y) is low for a fluent candidate that drops or invents content, the adequacy errors a
forward model's beam keeps. w = 0 is the beam's own best. w is chosen on dev; test is scored once.

    python benchmarks/noisy_channel.py --forward RUN --reverse RUN --data PREPARED [--beam 8]

PREPARED is the forward run's prepared folder (dev and test text in `{split}.{src,tgt}.txt`).
Prints dev BLEU at each weight, then test BLEU at w = 0 and at the chosen weight (lowercased
tokenized BLEU with `--lowercase-tokenized`, as Multi30k's results are).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import transduce
from transduce.decoding.channel import rerank, scored_candidates
from transduce.tasks.translation import scoring

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--forward", required=True)
    parser.add_argument("--reverse", required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--beam", type=int, default=8)
    parser.add_argument("--lowercase-tokenized", action="store_true")
    args = parser.parse_args()
    forward, reverse = transduce.load(args.forward), transduce.load(args.reverse)
    task = scoring(True) if args.lowercase_tokenized else forward.task.config  # the model's
    splits = {}
    for split in ("dev", "test"):
        sources = (args.data / f"{split}.src.txt").read_text(encoding="utf-8").splitlines()
        refs = (args.data / f"{split}.tgt.txt").read_text(encoding="utf-8").splitlines()
        began = time.perf_counter()
        decode = replace(forward.decode, beam_size=args.beam)
        candidates = scored_candidates(forward, reverse, sources, decode)
        n = sum(map(len, candidates))
        print(f"{split}: {n} candidates searched and channel-scored in "
              f"{time.perf_counter() - began:.1f} s")  # fmt: skip
        splits[split] = (candidates, refs)

    def bleu(split: str, weight: float) -> float:
        candidates, refs = splits[split]
        best = [ranked[0][0] for ranked in rerank(candidates, weight)]
        return transduce.score(best, refs, task).score

    dev = {weight: bleu("dev", weight) for weight in WEIGHTS}
    for weight, score in dev.items():
        print(f"dev  w = {weight:<4}  BLEU {score:.2f}")
    chosen = max(dev, key=lambda w: dev[w])
    print(f"test w = 0     BLEU {bleu('test', 0.0):.2f}  (the beam's best)")
    print(f"test w = {chosen:<4}  BLEU {bleu('test', chosen):.2f}  (w chosen on dev)")


if __name__ == "__main__":
    main()
