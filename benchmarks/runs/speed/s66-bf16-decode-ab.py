"""Session 66: decoding's bfloat16 route A/B, variants of its size rule alternated, medians (run
before `MIN_ROWS` was added; benchmarks/SPEED.md).

    python s66-bf16-decode-ab.py RUN DATA BATCH LINES ROUNDS
"""

import hashlib
import statistics
import sys
import time

import torch

from transduce.config import DecodeConfig
from transduce.data.dataset import PreparedData
from transduce.decoding.translate import Translator, decode_ids
from transduce.models import bf16_decoding

# name: (decode.precision, MIN_MULTIPLY_ADDS, WIDE)
VARIANTS = {
    "fp32": ("fp32", 0, 0),
    "bf16-all": ("bf16", 0, 0),
    "wide+2^25": ("bf16", 1 << 25, 256),
    "2^25": ("bf16", 1 << 25, 10**9),
}


def main() -> None:
    run, prepared = sys.argv[1], sys.argv[2]
    batch, lines, rounds = (int(a) for a in sys.argv[3:6])
    torch.set_num_threads(2)
    data = PreparedData.load(prepared)
    test = data.split("test")
    sources = [test.pair(i)[0].tolist() for i in range(min(lines, len(test)))]
    model = Translator.load(run, device="cpu").model
    cpu = torch.device("cpu")
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    digest = {}
    for _ in range(rounds):
        for name, (precision, least, wide) in VARIANTS.items():
            bf16_decoding.MIN_MULTIPLY_ADDS, bf16_decoding.WIDE = least, wide
            bf16_decoding.MIN_ROWS = 0  # as when it ran: no row bar yet
            decode = DecodeConfig(batch_size=batch, precision=precision)
            decode_ids(model, data.vocab, sources[:batch], decode, cpu)  # warm-up
            start = time.perf_counter()
            found = decode_ids(model, data.vocab, sources, decode, cpu)
            times[name].append(time.perf_counter() - start)
            tokens = str([h[0].tokens for h in found]).encode()
            digest[name] = hashlib.sha256(tokens).hexdigest()[:8]
    base = statistics.median(times["fp32"])
    for name, seconds in times.items():
        median = statistics.median(seconds)
        rounded = [round(s, 2) for s in seconds]
        print(f"{name:10s} median {median:6.2f} s  x{base / median:.2f}  {rounded}  {digest[name]}")


if __name__ == "__main__":
    main()
