"""Session 66: BLEU of `translate` in float32 against `decode.precision=auto` (bfloat16's large
products on an AVX-512 BF16 CPU), lowercased tokenized, and how many lines differ
(benchmarks/SPEED.md).

    python s66-bf16-decode-bleu.py RUN PREPARED_DATA SPLIT
"""

import sys
from dataclasses import replace
from pathlib import Path

import sacrebleu
import torch

from transduce.decoding.translate import Translator


def main() -> None:
    run, prepared, split = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    sources = (prepared / f"{split}.src.txt").read_text().splitlines()
    references = [(prepared / f"{split}.tgt.txt").read_text().lower().splitlines()]
    outputs = {}
    for precision in ("fp32", "auto"):
        translator = Translator.load(run, device="cpu")
        decode = replace(translator.decode, precision=precision, batch_size=64)
        outputs[precision] = [best[0][0] for best in translator.translate(sources, decode)]
        hypotheses = [line.lower() for line in outputs[precision]]
        score = sacrebleu.corpus_bleu(hypotheses, references, tokenize="none", force=True).score
        print(precision, split, round(score, 2), flush=True)
    differ = sum(a != b for a, b in zip(outputs["fp32"], outputs["auto"], strict=True))
    print(f"lines differing: {differ} of {len(sources)}")


if __name__ == "__main__":
    main()
