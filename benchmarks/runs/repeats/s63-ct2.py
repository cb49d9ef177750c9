"""Session 63: our rule against repeated n-grams beside CTranslate2's `no_repeat_ngram_size`, the
same weights (exported), the same sentences: outputs identical, and where they differ, which
output scores higher under the model (log P / the length penalty, teacher-forced) and whether
each keeps the rule.

    python benchmarks/runs/repeats/s63-ct2.py RUN PREPARED/test [LINES]
"""

import sys
import tempfile

import ctranslate2

import transduce
from transduce.config import DecodeConfig
from transduce.decoding.search import length_penalty
from transduce.export import export_ctranslate2


def repeats(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


def main() -> None:
    model, stem = sys.argv[1], sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    ours = transduce.load(model)
    lines = transduce.read_parallel(f"{stem}.src.txt", f"{stem}.tgt.txt").src[:count]
    folder = export_ctranslate2(model, tempfile.mkdtemp() + "/ct2")
    pieces = [[*ours.vocab.pieces(ids), "</s>"] for ids in ours.vocab.encode(lines)]
    theirs = ctranslate2.Translator(str(folder), device="cpu", intra_threads=2)
    longest = max(map(len, pieces)) + 50
    print(f"{model}, {len(lines)} lines of {stem}, CTranslate2 {ctranslate2.__version__}")
    for beam in (1, 4):
        for n in (0, 1, 2, 3, 4):
            found = theirs.translate_batch(
                pieces,
                beam_size=beam,
                length_penalty=0.6,
                no_repeat_ngram_size=n,
                max_decoding_length=longest,
            )
            their_ids = [ours.vocab.piece_ids(r.hypotheses[0]) for r in found]
            decode = DecodeConfig(beam_size=beam, alpha=0.6, no_repeat_ngram=n)
            mine = [hyps[0][1] for hyps in ours.hypotheses(lines, decode)]
            differ = [
                (i, t, m)
                for i, (t, m) in enumerate(zip(their_ids, mine, strict=True))
                if t != m.tokens
            ]
            higher = 0
            for i, tokens, hypothesis in differ:
                scored = ours.score([lines[i]], [ours.vocab.decode([tokens])[0]])[0]
                higher += hypothesis.score > scored.log_prob / length_penalty(len(tokens) + 1, 0.6)
            kept = sum(not repeats(t, n) for t in their_ids) if n else len(lines)
            print(
                f"beam {beam}, no_repeat_ngram {n}: {len(lines) - len(differ)}/{len(lines)} "
                f"identical; of the {len(differ)} others ours scores higher in {higher}; "
                f"CTranslate2's keep the rule: {kept}/{len(lines)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
