"""Ensemble decoding of session 54's probe (RESULTS.md, "Ensembles of `tiny`'s hours"), now
through the toolkit's ensembles (`transduce translate --model A --model B`, models/ensemble.py):
beam search over the mean of the members' next-token probabilities, each member a run's final
average, the first run's decoding settings (beam 4, alpha 1.0 for `tiny`).

    python s54-ensemble.py [--alpha A] DATA OUT_PREFIX RUN_DIR [RUN_DIR ...]
        -> OUT_PREFIX.{dev,test}.hyp

DATA: a prepared folder (its dev/test .src.txt); the runs must share its vocabulary. Score with
`transduce evaluate --hyp OUT_PREFIX.test.hyp --ref DATA/test.tgt.txt --lowercase-tokenized`."""

import argparse
import dataclasses
from pathlib import Path

from transduce.decoding.translate import Translator


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--alpha", type=float, help="length penalty (default: the first run's)")
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()
    translator = Translator.load(args.runs, device="cpu")
    decode = translator.decode
    if args.alpha is not None:
        decode = dataclasses.replace(decode, alpha=args.alpha)
    for split in ("dev", "test"):
        lines = Path(f"{args.data}/{split}.src.txt").read_text().splitlines()
        hypotheses = translator.translate(lines, decode)
        Path(f"{args.out}.{split}.hyp").write_text("".join(h[0][0] + "\n" for h in hypotheses))


if __name__ == "__main__":
    main()
