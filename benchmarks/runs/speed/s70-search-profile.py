import sys, time, torch, cProfile, pstats
from pathlib import Path
from transduce.decoding.translate import Translator, decode_ids
from transduce.config import DecodeConfig
torch.set_num_threads(1)
tr = Translator.load(Path("/work/bench/s70/ttq/run"), device="cpu")
model, vocab = tr.model, tr.vocab
lines = open("/work/bench/s70/data/test.src.txt").read().splitlines()[:40]
sources = vocab.encode(lines)
decode = DecodeConfig(beam_size=4, alpha=0.6, max_len_b=50, batch_size=1, workers=1)
keep = {}
with torch.inference_mode():
    decode_ids(model, vocab, sources[:5], decode, torch.device("cpu"), keep)
    pr = cProfile.Profile(); pr.enable(); t = time.perf_counter()
    decode_ids(model, vocab, sources, decode, torch.device("cpu"), keep)
    el = time.perf_counter() - t; pr.disable()
print("seconds", el)
pstats.Stats(pr).sort_stats("tottime").print_stats(25)
