"""Session 71: `--int8` a sentence at a time, three ways alternated in one process of one thread
(what each of `translate`'s default workers is): the plan handing int8's products to `linear`
(before), choosing by the row count itself (after), and after with the output projection in
int8 at any row count (`int8.MIN_WEIGHT` = 2^20, as with VNNI); float32 beside them.

    python s71-int8-ab.py RUN PREPARED [SENTENCES] [ROUNDS]
"""

import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

from transduce.config import DecodeConfig
from transduce.decoding.translate import Translator, decode_ids
from transduce.models import int8, matmul

torch.set_num_threads(1)
run, prepared = Path(sys.argv[1]), Path(sys.argv[2])
count = int(sys.argv[3]) if len(sys.argv) > 3 else 60
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
translator = Translator.load(run, device="cpu")
model, vocab = translator.model, translator.vocab
sources = vocab.encode((prepared / "test.src.txt").read_text().splitlines()[:count])
decode = DecodeConfig(beam_size=4, alpha=0.6, max_len_b=50, batch_size=1, workers=1)
chosen_once = matmul.product_for_decoding
never_large = int8.MIN_WEIGHT


def before(weight, bias):
    if int8.active():
        return partial(matmul.linear, weight=weight, bias=bias)
    return chosen_once(weight, bias)


def way(name):
    matmul.product_for_decoding = before if name == "int8 before" else chosen_once
    int8.MIN_WEIGHT = 1 << 20 if name == "int8 + output" else never_large
    return None if name == "float32" else {}


names = ["float32", "int8 before", "int8 after", "int8 + output"]
times = {n: [] for n in names}
outputs = {}
with torch.inference_mode():
    for r in range(rounds + 1):
        for name in names if r % 2 else names[::-1]:
            store = way(name)
            start = time.perf_counter()
            hyps = decode_ids(model, vocab, sources, decode, torch.device("cpu"), {}, store)
            if r:  # the first round warms up
                times[name].append(time.perf_counter() - start)
            outputs[name] = [h[0].tokens for h in hyps]
print(f"{count} sentences, {rounds} rounds alternated, seconds (median; all)")
for name in names:
    same = outputs[name] == outputs["float32"]
    t = times[name]
    laps = [round(x, 2) for x in t]
    print(f"{name:15s} {statistics.median(t):6.2f}  {laps}  same as float32: {same}")
