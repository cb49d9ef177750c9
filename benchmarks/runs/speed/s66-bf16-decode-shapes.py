"""Session 66: one product at decoding's shapes, float32 (the `matmul` route, weights packed)
against bfloat16 (`bf16_decoding`, every product), 2 threads, lower-quartile times of 200 calls
(benchmarks/SPEED.md)."""

import time

import torch

from transduce.models import bf16_decoding, matmul

SHAPES = [(128, 128), (128, 384), (128, 512), (512, 128), (128, 8000),
          (256, 256), (256, 768), (256, 1024), (1024, 256), (256, 8000)]  # fmt: skip


def lower_quartile(call, n: int = 200) -> float:
    for _ in range(20):
        call()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return sorted(times)[n // 4]


def main() -> None:
    torch.set_num_threads(2)
    bf16_decoding.MIN_MULTIPLY_ADDS, bf16_decoding.MIN_ROWS = 0, 0
    for n_in, n_out in SHAPES:
        weight = torch.randn(n_out, n_in) * 0.05
        for rows in (4, 64, 256):
            x = torch.randn(rows, n_in)
            with torch.no_grad(), matmul.packed_for_inference():
                fp32 = lower_quartile(lambda x=x, w=weight: matmul.linear(x, w))
            with torch.no_grad(), bf16_decoding.bf16_products():
                bf16 = lower_quartile(lambda x=x, w=weight: matmul.linear(x, w))
            print(f"{n_in}x{n_out} rows {rows}: fp32 {fp32 * 1e6:7.1f} us  "
                  f"bf16 {bf16 * 1e6:7.1f} us  x{fp32 / bf16:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
