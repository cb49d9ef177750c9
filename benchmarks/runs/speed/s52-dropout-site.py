"""Session 52: one residual dropout site of `small`'s shape (96 x 30 x 256) timed step by step,
session 10's way against session 52's, the allocator tuned as training tunes it.

    python benchmarks/runs/speed/s52-dropout-site.py [ROUNDS]

Prints microseconds a call (the mean of 200 after 20 to warm up), each step then the whole site
(forward and backward), in ROUNDS rounds (default 3).
"""

import sys
import time

import numpy as np
import torch

from transduce.models.dropout import LEVELS, Dropout
from transduce.runtime import keep_freed_memory

SHAPE = torch.Size((96, 30, 256))
RATE = 0.1


def main() -> None:
    torch.set_num_threads(2)
    keep_freed_memory()
    numel, levels = SHAPE.numel(), round(RATE * LEVELS)
    scale, level = LEVELS / (LEVELS - levels), levels - LEVELS // 2
    residual, x, grad = (
        torch.randn(SHAPE),
        torch.randn(SHAPE, requires_grad=True),
        torch.randn(SHAPE),
    )
    draws = np.random.SFC64(1).random_raw((numel + 3) // 4)
    integers = draws.view(np.int16)[:numel]
    torch_integers = torch.from_numpy(integers).view(SHAPE)
    dropped = torch_integers < level
    keep = (~dropped).view(torch.uint8)
    plain = x.detach()
    steps = {
        "torch random_ of int64 (session 10)": lambda: torch.empty(
            (numel + 3) // 4, dtype=torch.int64
        ).random_(-(1 << 63), None),
        "numpy SFC64 random_raw (now)": lambda: np.random.SFC64(7).random_raw((numel + 3) // 4),
        "torch int16 < level (session 10)": lambda: torch_integers < level,
        "numpy greater_equal (now)": lambda: np.greater_equal(integers, level),
        "masked_fill (session 10)": lambda: plain.masked_fill(dropped, 0.0),
        "x scale (session 10)": lambda: plain * scale,
        "residual + x (session 10)": lambda: residual + plain,
        "addcmul with uint8 keep (now)": lambda: torch.addcmul(residual, plain, keep, value=scale),
        "where(mask, 0, x) (not kept)": lambda: torch.where(dropped, 0.0, plain),
    }
    new_site = Dropout(RATE)

    def session_10_site():
        with torch.no_grad():
            raw = torch.empty((numel + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)
            mask = raw.view(torch.int16)[:numel].view(SHAPE) < level
        (residual + x.masked_fill(mask, 0.0) * scale).backward(grad)

    def site_now():
        new_site(x, residual).backward(grad)

    for r in range(1, int(sys.argv[1]) + 1 if len(sys.argv) > 1 else 4):
        print(f"round {r}")
        for name, step in steps.items():
            print(f"  {name}: {_timed(step):,.0f} us")
        print(f"  the site, forward and backward, session 10: {_timed(session_10_site):,.0f} us")
        print(f"  the site, forward and backward, now: {_timed(site_now):,.0f} us")


def _timed(step, calls: int = 200) -> float:
    for _ in range(20):
        step()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    return (time.perf_counter() - start) / calls * 1e6


if __name__ == "__main__":
    main()
