"""Where an int8 product's time goes at decoding's shapes (session 71): float32 (packed for
oneDNN, or MKL), int8 whole (`int8._product`), and the row rounding alone (`_quantized_rows`).
One thread or two (argument), `small`'s shapes (d_model 256, d_ff 1024, 8,000 pieces), median
of rounds.

    python s71-int8-products.py [THREADS]
"""

import statistics
import sys
import time

import torch

from transduce.models import int8, matmul
from transduce.runtime import keep_freed_memory

keep_freed_memory()

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
SHAPES = [(256, 256), (768, 256), (1024, 256), (256, 1024), (8000, 256)]
ROWS = [4, 64, 160, 256]


def timed(fn, *args, reps=200):
    for _ in range(10):
        fn(*args)
    laps = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            fn(*args)
        laps.append((time.perf_counter() - t) / reps * 1e6)
    return statistics.median(laps)


print(f"threads {torch.get_num_threads()}; us per product")
print("rows  weight        fp32-packed  fp32-mkl  int8  rounding  int8/fp32")
for n, k in SHAPES:
    w, b = torch.randn(n, k) / k**0.5, torch.randn(n)
    packed = matmul._packed_copy(w)
    q = int8.Int8Weight.of(w)
    for m in ROWS:
        x = torch.randn(m, k)
        with torch.no_grad():
            f = timed(matmul._onednn, x, packed, b)
            mk = timed(torch.nn.functional.linear, x, w, b)
            i = timed(int8._product, x, q, b)
            r = timed(int8._quantized_rows, x)
        best = min(f, mk)
        print(f"{m:4d}  {n:5d}x{k:<5d}  {f:10.1f}  {mk:8.1f}  {i:6.1f}  {r:7.1f}  {best / i:8.2f}x")
