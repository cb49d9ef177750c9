"""Interactive translation simulated with the references: how well a model completes a correct
start of the translation (`translate --prefix`).

A translator accepts or types the first k words and the model completes the rest (Knowles and
Koehn 2016). The reference's first k words stand in for the translator's, for k in --words, and
with --letters N also the first N letters of its word k + 1, as typed so far (word-level
autocompletion):

- next-word accuracy: the word the model writes after the k given ones is the reference's word
  k + 1 (word prediction accuracy, the measure of interactive translation), over the sentences
  whose reference has more than k words; beside it, the share of the model's own translations
  (no prefix) whose first k + 1 words are the reference's;
- BLEU of the whole output (the k words included) against the reference;
- the decoding time, the same beam as without a prefix.

    python benchmarks/prefix_completion.py --model RUN --data PREPARED [--split test]
        [--words 0 1 2 3] [--letters 0 1 2] [--beam 4] [--lowercase-tokenized]

PREPARED holds `{split}.src.txt` and `{split}.tgt.txt` (a `prepare`d folder). Prints a line per
k and N.
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--words", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--letters", type=int, nargs="+", default=[0])
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--lowercase-tokenized", action="store_true")
    args = parser.parse_args()
    translator = transduce.load(args.model)
    task = scoring(True) if args.lowercase_tokenized else translator.task.config  # the model's
    stem = args.data / args.split
    split = transduce.read_parallel(f"{stem}.src.txt", f"{stem}.tgt.txt")  # equal line counts
    sources, references = split.src, split.tgt
    decode = replace(translator.decode, beam_size=args.beam)
    print(f"{args.model}, {args.split} ({len(sources)} lines), beam {args.beam}")
    own = [hypotheses[0][0] for hypotheses in translator.translate(sources, decode)]
    for k in args.words:
        for letters in args.letters:
            prefixes = [typed(reference, k, letters) for reference in references]
            # A reference with characters the vocabulary lacks cannot be a start: none given.
            prefixes = [p if not translator.vocab.lacking(p) else "" for p in prefixes]
            began = time.perf_counter()
            found = translator.translate(sources, decode, prefixes=prefixes)
            seconds = time.perf_counter() - began
            outputs = [hypotheses[0][0] for hypotheses in found]
            right, asked = next_words(outputs, references, k)
            unforced = next_words(own, references, k)[0]
            bleu = transduce.score(outputs, references, task).score
            share, own_share = (100 * n / max(asked, 1) for n in (right, unforced))
            print(f"k = {k}, {letters} letters: next word {right}/{asked} = {share:.1f}% (own "
                  f"translations' first {k + 1} words: {own_share:.1f}%), BLEU {bleu:.2f}, "
                  f"{seconds:.1f} s")  # fmt: skip


def typed(reference: str, k: int, letters: int) -> str:
    """The reference's first k words, each ended by its space, and the first `letters` letters
    of the next: what a translator has typed so far."""
    words = reference.split()
    start = "".join(word + " " for word in words[:k])
    return start + (words[k][:letters] if k < len(words) else "")


def next_words(outputs: list[str], references: list[str], k: int) -> tuple[int, int]:
    """How many outputs continue their reference's first k words with its word k + 1, of the
    references longer than k words. An output whose first k words differ (a piece glued onto
    the k-th word) counts as wrong."""
    right = asked = 0
    for output, reference in zip(outputs, references, strict=True):
        written, wanted = output.split(), reference.split()
        if len(wanted) <= k:
            continue
        asked += 1
        right += written[: k + 1] == wanted[: k + 1]
    return right, asked


if __name__ == "__main__":
    main()
