"""Throwaway: MBR reranking of an n-best file ('i ||| text ||| score'), scored on references.

python mbr.py NBEST REF [--temps 0,0.5,1,2] -> corpus BLEU (lowercased tokenized, none) of
the top hypothesis and of the MBR choice with sentence BLEU / chrF utilities.
"""

import math
import sys
from collections import defaultdict

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF

nbest_path, ref_path = sys.argv[1], sys.argv[2]
temps = [float(t) for t in (sys.argv[3] if len(sys.argv) > 3 else "0,0.5,1,2,1000").split(",")]
groups = defaultdict(list)
with open(nbest_path, encoding="utf-8") as nbest:
    for line in nbest:
        i, text, score = line.rstrip("\n").split(" ||| ")
        groups[int(i)].append((text, float(score)))
with open(ref_path, encoding="utf-8") as ref_file:
    refs = [line.rstrip("\n") for line in ref_file]
n = len(refs)
assert len(groups) == n, (len(groups), n)

sbleu = BLEU(tokenize="none", lowercase=True, effective_order=True)
chrf = CHRF()


def corpus(hyps):
    return sacrebleu.corpus_bleu(hyps, [refs], tokenize="none", lowercase=True, force=True).score


def utility_matrix(cands, kind):
    m = len(cands)
    u = [[0.0] * m for _ in range(m)]
    for a in range(m):
        for b in range(m):
            if a == b:
                u[a][b] = 100.0
            elif kind == "bleu":
                u[a][b] = sbleu.sentence_score(cands[a], [cands[b]]).score
            else:
                u[a][b] = chrf.sentence_score(cands[a], [cands[b]]).score
    return u


print("top:", round(corpus([groups[i][0][0] for i in range(n)]), 2))
for kind in ("bleu", "chrf"):
    mats = {i: utility_matrix([t for t, _ in groups[i]], kind) for i in range(n)}
    for temp in temps:
        chosen = []
        for i in range(n):
            cands = groups[i]
            if temp == 0:
                w = [1.0] * len(cands)
            else:
                top = max(s for _, s in cands)
                w = [math.exp((s - top) / temp) for _, s in cands]
            z = sum(w)
            u = mats[i]
            best = max(
                range(len(cands)), key=lambda a: sum(w[b] / z * u[a][b] for b in range(len(cands)))
            )
            chosen.append(cands[best][0])
        print(kind, "temp", temp, round(corpus(chosen), 2))
