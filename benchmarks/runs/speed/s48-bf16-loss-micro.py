"""Session 48: the training loss's projection alone (forward and backward), float32 against the
bf16 route's `bf16.Projection`, at `small`'s shapes (2,048 target tokens x 256, 10,000 words),
alternated call by call, 2 threads: median milliseconds of 30 calls each.

    python benchmarks/runs/speed/s48-bf16-loss-micro.py
"""

import statistics
import time
from contextlib import nullcontext

import torch

from transduce.models import bf16
from transduce.training.loss import projected_label_smoothed_loss


def main() -> None:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    hidden = torch.randn(64, 32, 256, requires_grad=True)
    weight = (0.05 * torch.randn(10_000, 256)).requires_grad_()
    target = torch.randint(4, 10_000, (64, 32))
    times: dict[str, list[float]] = {"float32": [], "bfloat16": []}
    for call in range(35):
        for name, context in (("float32", nullcontext), ("bfloat16", bf16.products)):
            start = time.perf_counter()
            with context():
                sums = projected_label_smoothed_loss(hidden, weight, target, 0.1, 0)
            sums.loss.backward()
            if call >= 5:  # after warm-up
                times[name].append(time.perf_counter() - start)
    for name, values in times.items():
        print(f"{name}: {1000 * statistics.median(values):.1f} ms median of {len(values)}")


if __name__ == "__main__":
    main()
