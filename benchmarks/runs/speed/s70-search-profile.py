"""Session 70: where beam search at batch 1 spends its time (cProfile), 40 test sentences, one
process of one thread, a trained `small`.

    python benchmarks/runs/speed/s70-search-profile.py RUN PREPARED
"""

import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

from transduce.config import DecodeConfig
from transduce.decoding.translate import Translator, decode_ids

torch.set_num_threads(1)
run, prepared = Path(sys.argv[1]), Path(sys.argv[2])
translator = Translator.load(run, device="cpu")
model, vocab = translator.model, translator.vocab
sources = vocab.encode((prepared / "test.src.txt").read_text().splitlines()[:40])
decode = DecodeConfig(beam_size=4, alpha=0.6, max_len_b=50, batch_size=1, workers=1)
packed = {}
with torch.inference_mode():
    decode_ids(model, vocab, sources[:5], decode, torch.device("cpu"), packed)  # warm up
    profile = cProfile.Profile()
    profile.enable()
    start = time.perf_counter()
    decode_ids(model, vocab, sources, decode, torch.device("cpu"), packed)
    seconds = time.perf_counter() - start
    profile.disable()
print("seconds", seconds)
pstats.Stats(profile).sort_stats("tottime").print_stats(25)
