"""Session 71: `--int8` beam search at batch 64 with the rows rounded as the package does (a cast
straight from float to uint8) or through int16 (the trial, not kept), alternated in one process
of one thread, 256 test sentences.

    python s71-rounding-ab.py RUN PREPARED [ROUNDS]
"""

import statistics
import sys
import time
from pathlib import Path

import torch

from transduce.config import DecodeConfig
from transduce.decoding.translate import Translator, decode_ids
from transduce.models import int8

torch.set_num_threads(1)
run, prepared = Path(sys.argv[1]), Path(sys.argv[2])
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
translator = Translator.load(run, device="cpu")
model, vocab = translator.model, translator.vocab
sources = vocab.encode((prepared / "test.src.txt").read_text().splitlines()[:256])
decode = DecodeConfig(beam_size=4, alpha=0.6, max_len_b=50, batch_size=64, workers=1)
package = int8._quantized_rows


def through_int16(x):
    low, high = (v.item() for v in torch.aminmax(x))
    low, high = min(low, 0.0), max(high, 0.0)
    scale = (high - low) / int8.ROW_MAX or 1.0
    zero_point = min(max(round(-low / scale), 0), int8.ROW_MAX)
    q = torch.mul(x, 1 / scale).round_().add_(zero_point).clamp_(0, int8.ROW_MAX)
    return q.to(torch.int16).to(torch.uint8), scale, zero_point


ways = {"cast from float": package, "through int16": through_int16}
times = {n: [] for n in ways}
outputs = {}
with torch.inference_mode():
    for r in range(rounds + 1):
        for name in ways if r % 2 else list(ways)[::-1]:
            int8._quantized_rows = ways[name]
            start = time.perf_counter()
            hyps = decode_ids(model, vocab, sources, decode, torch.device("cpu"), {}, {})
            if r:
                times[name].append(time.perf_counter() - start)
            outputs[name] = [h[0].tokens for h in hyps]
print(f"256 sentences, batch 64, {rounds} rounds alternated, seconds (median; all)")
for name, t in times.items():
    laps = [round(x, 2) for x in t]
    print(f"{name:16s} {statistics.median(t):6.2f}  {laps}")
print("the same outputs:", outputs["cast from float"] == outputs["through int16"])
