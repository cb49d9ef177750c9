"""Rounding decoding's rows to uint8 for oneDNN's int8 products (session 71), one thread: the
package's chain (ending in a float -> uint8 cast) against casting through int32 or int16 first.

    python s71-rounding.py
"""

import statistics
import time

import torch

from transduce.models import int8
from transduce.runtime import keep_freed_memory

keep_freed_memory()
torch.set_num_threads(1)
TOP = int8.ROW_MAX


def timed(fn, x, reps=300):
    for _ in range(10):
        fn(x)
    laps = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(reps):
            fn(x)
        laps.append((time.perf_counter() - t) / reps * 1e6)
    return statistics.median(laps)


def through(dtype):
    def rounded(x):
        low, high = (v.item() for v in torch.aminmax(x))
        low, high = min(low, 0.0), max(high, 0.0)
        scale = (high - low) / TOP or 1.0
        zero_point = min(max(round(-low / scale), 0), TOP)
        q = torch.mul(x, 1 / scale).round_().add_(zero_point).clamp_(0, TOP)
        return q.to(dtype).to(torch.uint8), scale, zero_point

    return rounded


ways = {"current": int8._quantized_rows, "via int32": through(torch.int32),
        "via int16": through(torch.int16)}  # fmt: skip
print("rows x K      " + "  ".join(f"{n:>10s}" for n in ways))
for shape in [(4, 256), (4, 1024), (64, 256), (64, 1024), (256, 256), (256, 1024), (1024, 256)]:
    x = torch.randn(shape) * 3
    for name, way in ways.items():
        assert torch.equal(way(x)[0], ways["current"](x)[0]), name
    print(f"{shape!s:12s}  " + "  ".join(f"{timed(w, x):10.1f}" for w in ways.values()))
