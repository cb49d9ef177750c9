"""Ensemble decoding, a probe (session 54; RESULTS.md, "Ensembles of `tiny`'s hours"): beam search
over the mean of the members' next-token probabilities, each member a run's final average, the
first run's decoding settings (beam 4, alpha 1.0 for `tiny`). Not yet a feature of the toolkit.

    python s54-ensemble.py [--alpha A] DATA OUT_PREFIX RUN_DIR [RUN_DIR ...]
        -> OUT_PREFIX.{dev,test}.hyp

DATA: a prepared folder (its dev/test .src.txt); the runs must share its vocabulary. Score with
`transduce evaluate --hyp OUT_PREFIX.test.hyp --ref DATA/test.tgt.txt --lowercase-tokenized`."""

import argparse
import dataclasses
import math
from pathlib import Path

import torch

from transduce.decoding.translate import Translator
from transduce.models.saved import load_model


class EnsembleCache:
    def __init__(self, caches):
        self.caches = caches

    def reorder(self, index, group=None):
        for cache in self.caches:
            cache.reorder(index, group)


class Ensemble(torch.nn.Module):
    def __init__(self, members):
        super().__init__()
        self.members = torch.nn.ModuleList(members)
        self.pad = members[0].pad

    @property
    def max_positions(self):
        return self.members[0].max_positions

    def encode(self, src):
        return [member.encode(src) for member in self.members]

    def init_cache(self, encoded, group=1):
        pairs = zip(self.members, encoded, strict=True)
        return EnsembleCache([member.init_cache(e, group) for member, e in pairs])

    def step(self, tokens, cache):  # the log of the mean probability: already normalised
        pairs = zip(self.members, cache.caches, strict=True)
        log_probs = [torch.log_softmax(member.step(tokens, c).float(), -1) for member, c in pairs]
        return torch.logsumexp(torch.stack(log_probs), 0) - math.log(len(self.members))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--alpha", type=float, help="length penalty (default: the first run's)")
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()
    saved = [load_model(run) for run in args.runs]
    first = saved[0]
    decode = first.config.decode
    if args.alpha is not None:
        decode = dataclasses.replace(decode, alpha=args.alpha)
    model = Ensemble([s.model for s in saved]).eval()
    translator = Translator(model, first.vocab, decode, torch.device("cpu"), first.config.task)
    for split in ("dev", "test"):
        lines = Path(f"{args.data}/{split}.src.txt").read_text().splitlines()
        hypotheses = translator.translate(lines)
        Path(f"{args.out}.{split}.hyp").write_text("".join(h[0][0] + "\n" for h in hypotheses))


if __name__ == "__main__":
    main()
