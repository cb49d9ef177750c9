"""Session 49: the FFN's forward and backward on the bf16 route, through `linear` twice (the
route before: the hidden units raised to float32 and rounded back) against `bf16.feed_forward`
(the hidden units kept bfloat16), alternated call by call, 2 threads: median of 30 calls.

    python benchmarks/runs/speed/s49-ffn-micro.py D_MODEL D_FF ROWS RELU_DROPOUT
"""

import statistics
import sys
import time

import torch

from transduce.models import bf16
from transduce.models.transformer import FeedForward


def main() -> None:
    d_model, d_ff, rows, rate = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    torch.set_num_threads(2)
    torch.manual_seed(0)
    ffn = FeedForward(d_model, d_ff, float(rate)).train()
    x, grad = torch.randn(rows, d_model, requires_grad=True), torch.randn(rows, d_model)
    routes = {
        "linear twice": lambda: ffn.w_2(ffn.dropout(torch.relu(ffn.w_1(x)))),
        "feed_forward": lambda: ffn(x),
    }
    times: dict[str, list[float]] = {name: [] for name in routes}
    for call in range(35):
        for name, route in routes.items():
            start = time.perf_counter()
            with bf16.products():
                out = route()
            out.backward(grad)
            if call >= 5:  # after warm-up
                times[name].append(time.perf_counter() - start)
    print(f"d_model {d_model}, d_ff {d_ff}, {rows} rows, relu dropout {rate}:")
    for name, values in times.items():
        print(f"  {name}: {1000 * statistics.median(values):.2f} ms median of {len(values)}")


if __name__ == "__main__":
    main()
