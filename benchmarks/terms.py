"""Terminology simulated with the references: how well a model places given terms
(`translate --terms`, lexically constrained beam search).

A glossary says how a term must come out; here the reference stands in for it (as Post and
Vilar 2018 and Hu et al. 2019 measure): for each sentence, N words of its reference that the
model's own translation lacks (--terms N, words of at least --min-letters letters; the case a
glossary is for), drawn with a fixed seed. Then, for each beam of --beams:

- terms held: the share of terms the output holds as whole words, without and with --terms
  (the search guarantees its tokens; this counts words, what a reader sees);
- BLEU of the output against the reference, without and with terms;
- the decoding time, against the same beam without terms.

    python benchmarks/terms.py --model RUN --data PREPARED [--split test] [--terms 1 2]
        [--beams 4 8] [--lowercase-tokenized]

PREPARED holds `{split}.src.txt` and `{split}.tgt.txt` (a `prepare`d folder). Prints a line
per term count and beam.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import replace
from pathlib import Path

import transduce
from transduce.tasks.translation import scoring


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--terms", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--beams", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--min-letters", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lowercase-tokenized", action="store_true")
    args = parser.parse_args()
    translator, task = transduce.load(args.model), scoring(args.lowercase_tokenized)
    stem = args.data / args.split
    split = transduce.read_parallel(f"{stem}.src.txt", f"{stem}.tgt.txt")  # equal line counts
    sources, references = split.src, split.tgt
    print(f"{args.model}, {args.split} ({len(sources)} lines)")
    for beam in args.beams:
        decode = replace(translator.decode, beam_size=beam, terms_beam=beam)  # this beam
        began = time.perf_counter()
        own = [hyps[0][0] for hyps in translator.translate(sources, decode)]
        plain_seconds = time.perf_counter() - began
        plain_bleu = transduce.score(own, references, task).score
        for count in args.terms:
            rng = random.Random(args.seed)
            pairs = zip(own, references, strict=True)
            terms = [missed(o, r, count, args.min_letters, rng) for o, r in pairs]
            terms = [[t for t in line if not translator.vocab.lacking(t)] for line in terms]
            began = time.perf_counter()
            found = translator.translate(sources, decode, terms=terms)
            seconds = time.perf_counter() - began
            outputs = [hyps[0][0] for hyps in found]
            bleu = transduce.score(outputs, references, task).score
            asked = sum(map(len, terms))
            print(f"beam {beam}, {count} term(s) a line ({asked} in all, on "
                  f"{sum(map(bool, terms))} lines): held {held(own, terms)}/{asked} without, "
                  f"{held(outputs, terms)}/{asked} with; BLEU {plain_bleu:.2f} -> {bleu:.2f}; "
                  f"{plain_seconds:.1f} s -> {seconds:.1f} s")  # fmt: skip


def missed(output: str, reference: str, count: int, letters: int, rng: random.Random):
    """Up to `count` distinct words of the reference the output lacks, of at least `letters`
    letters, in the reference's order."""
    words = set(output.split())
    lacking = sorted({w for w in reference.split() if w.isalpha() and len(w) >= letters} - words)
    chosen = set(rng.sample(lacking, min(count, len(lacking))))
    return [w for w in dict.fromkeys(reference.split()) if w in chosen]


def held(outputs: list[str], terms: list[list[str]]) -> int:
    """Terms the outputs hold as whole words."""
    pairs = zip(outputs, terms, strict=True)
    return sum(term in output.split() for output, line in pairs for term in line)


if __name__ == "__main__":
    main()
