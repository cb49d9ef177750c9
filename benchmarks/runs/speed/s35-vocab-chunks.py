"""Session 35 (issue 17, target 4): can beam search's vocabulary step gain from staying in cache?

One step of `small`'s batch-64 beam search ends with the output projection of 256 rows (256 x
10,000, the shared embedding prepacked for oneDNN), the log-softmax over its logits and each
row's 8 best tokens (`search.top_k`). Session 30 measured the product at 14.1 ms and the
log-softmax at 5.6 ms inside a step against 10.4-11.0 and 2.6 ms alone: the 10 MB of logits come
back from memory. Timed here, with 24 MB written between calls as a step's other work would:

  full       the search as it is
  rowsN      the same in chunks of N rows, each chunk's logits still in cache for its softmax
  colsN      N vocabulary columns at a time, a running log-sum-exp and each chunk's candidates,
             the full logits never written (exact up to float rounding; a few ties differ)

    python benchmarks/runs/speed/s35-vocab-chunks.py
"""

import time

import torch

from transduce.decoding.search import top_k
from transduce.models import matmul

torch.set_num_threads(2)
torch.manual_seed(0)
V, D, N = 10_000, 256, 256
W = torch.randn(V, D) * 0.05
h = torch.randn(N, D)
other = torch.randn(6_000_000)


def full():
    lp = torch.log_softmax(matmul.linear(h, W), dim=-1)
    lp[:, [0, 1]] = float("-inf")
    return top_k(lp, 8)


def rows(n):
    values, index = [], []
    for c in range(0, N, n):
        lp = torch.log_softmax(matmul.linear(h[c : c + n], W), dim=-1)
        lp[:, [0, 1]] = float("-inf")
        v, i = top_k(lp, 8)
        values.append(v)
        index.append(i)
    return torch.cat(values), torch.cat(index)


def cols(n):
    lse, cand_v, cand_i = [], [], []
    for c in range(0, V, n):
        logits = matmul.linear(h, W[c : c + n])
        lse.append(torch.logsumexp(logits, dim=-1, keepdim=True))
        v, i = logits.topk(8, dim=1)
        cand_v.append(v)
        cand_i.append(i + c)
    total = torch.logsumexp(torch.cat(lse, 1), 1, keepdim=True)
    v, j = torch.cat(cand_v, 1).topk(8, dim=1)
    return v - total, torch.cat(cand_i, 1).gather(1, j)


def timed(f, calls=40):
    times = []
    for _ in range(calls):
        other.add_(1e-9)  # the rest of a step passes through the cache
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return sorted(times)[calls // 2] * 1e3


with matmul.packed_for_inference():
    reference = full()
    assert torch.equal(rows(64)[1], reference[1])
    arms = {
        "full": full,
        "rows64": lambda: rows(64),
        "rows128": lambda: rows(128),
        "cols2000": lambda: cols(2000),
        "cols5000": lambda: cols(5000),
    }
    for round_ in range(2):
        print(
            round_, "  ".join(f"{name} {timed(f):.2f} ms" for name, f in arms.items()), flush=True
        )
