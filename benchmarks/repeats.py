"""What ruling out repeated n-grams (`translate --no-repeat-ngram N`) does to a model's output:
its loops, its length and its score, for each N.

For each N of --sizes (0: the paper's search, nothing ruled out), over a `prepare`d split:

- loops: the outputs holding some n-gram of --loop subwords twice (a repeat of that length is
  nearly always a loop: "mit einem mann mit einem mann");
- the task's score (BLEU as the run scores it, with sacreBLEU's length ratio) and the
  decoding time.

    python benchmarks/repeats.py --model RUN --data PREPARED [--split test] [--sizes 0 2 3 4]
        [--beam 4] [--loop 4] [--no-unk]

`--no-unk`: every run with the unknown token ruled out too (`translate --no-unk`); each line
counts the outputs holding it.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import transduce


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--sizes", type=int, nargs="+", default=[0, 2, 3, 4])
    parser.add_argument("--beam", type=int, help="default: the run's")
    parser.add_argument("--loop", type=int, default=4, help="a repeat of this many subwords")
    parser.add_argument("--no-unk", action="store_true", help="the unknown token ruled out")
    args = parser.parse_args()
    translator = transduce.load(args.model)
    stem = args.data / args.split
    split = transduce.read_parallel(f"{stem}.src.txt", f"{stem}.tgt.txt")  # equal line counts
    sources, references = split.src, split.tgt
    beam = args.beam or translator.decode.beam_size
    print(f"{args.model}, {args.split} ({len(sources)} lines), beam {beam}")
    translator.translate(sources[:64])  # warm: the first call packs the weights for oneDNN
    for size in args.sizes:
        decode = replace(translator.decode, beam_size=beam, no_repeat_ngram=size,
                         no_unk=args.no_unk)  # fmt: skip
        began = time.perf_counter()
        found = translator.hypotheses(sources, decode)
        seconds = time.perf_counter() - began
        outputs = [hyps[0][0] for hyps in found]
        loops = sum(repeats(hyps[0][1].tokens, args.loop) for hyps in found)
        unknown = sum(translator.vocab.unk in hyps[0][1].tokens for hyps in found)
        score = transduce.score(outputs, references, translator.task.config)
        print(f"no_repeat_ngram {size}: {loops}/{len(found)} outputs hold a {args.loop}-gram "
              f"twice, {unknown} the unknown token; {score.detail}; {seconds:.1f} s")  # fmt: skip


def repeats(tokens: list[int], n: int) -> bool:
    """Whether `tokens` hold some n-gram twice."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


if __name__ == "__main__":
    main()
