"""The fused attention kernel against the explicit formula on a CPU, by span: where training's
switch (`attention.EXPLICIT_TRAINING_SPAN`) belongs on this host.

    python benchmarks/attention_spans.py [--heads 4] [--d-k 32 64] [--tokens 4096] [--threads 2]

For each span T (queries = keys = T), a batch of tokens / T rows, each row's keys padded from a
random length in [T/2, T] (as the encoder's and the cross-attention's masks do): milliseconds of
`F.scaled_dot_product_attention` and of `attention_reference`, forward and backward together
(training) and forward alone, and their ratio (> 1: the explicit formula is faster).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from transduce.models.attention import attention_reference

SPANS = (8, 12, 16, 24, 32, 40, 48, 64, 96)


def milliseconds(work, repeats: int = 30) -> float:
    for _ in range(5):
        work()
    start = time.perf_counter()
    for _ in range(repeats):
        work()
    return (time.perf_counter() - start) / repeats * 1e3


def compare(span: int, heads: int, d_k: int, tokens: int) -> dict[str, float]:
    rows = max(1, tokens // span)
    q, k, v = (torch.randn(rows, heads, span, d_k, requires_grad=True) for _ in range(3))
    lengths = torch.randint(span // 2, span + 1, (rows,))
    mask = (torch.arange(span)[None, :] < lengths[:, None])[:, None, None, :]
    grad = torch.randn(rows, heads, span, d_k)

    def fused():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def explicit():
        return attention_reference(q, k, v, mask)[0]

    times = {}
    for name, attend in (("kernel", fused), ("explicit", explicit)):
        times[f"{name} train"] = milliseconds(lambda attend=attend: attend().backward(grad))
        with torch.no_grad():
            times[f"{name} forward"] = milliseconds(attend)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-k", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.heads} heads, ms per call")
    columns = (
        "d_k | span | rows | kernel train | explicit train | ratio | kernel fwd | explicit fwd"
    )
    print(f"| {columns} | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d_k in args.d_k:
        for span in SPANS:
            t = compare(span, args.heads, d_k, args.tokens)
            print(
                f"| {d_k} | {span} | {max(1, args.tokens // span)} "
                f"| {t['kernel train']:.2f} | {t['explicit train']:.2f} "
                f"| {t['kernel train'] / t['explicit train']:.2f} "
                f"| {t['kernel forward']:.2f} | {t['explicit forward']:.2f} "
                f"| {t['kernel forward'] / t['explicit forward']:.2f} |"
            )


if __name__ == "__main__":
    main()
