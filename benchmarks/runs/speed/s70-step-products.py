"""Session 70: the 19 products of a decoding step of `small`, cycled as a step reads them (so
their weights come from memory, not cache), by route: oneDNN packed for 64, 4 or 1 rows, oneDNN
plain, MKL as x W^T and as W x^T.

    python benchmarks/runs/speed/s70-step-products.py [THREADS] [ROWS]
"""

import statistics
import sys
import time

import torch

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 4
layer = [(768, 256), (256, 256), (256, 256), (256, 256), (1024, 256), (256, 1024)]
shapes = layer * 3 + [(8000, 256)]
weights = [torch.randn(shape) * 0.05 for shape in shapes]
biases = [torch.randn(shape[0]) for shape in shapes]
packed = {n: [torch.ops.mkldnn._reorder_linear_weight(w, n) for w in weights] for n in (1, 4, 64)}


def ms_per_cycle(product, repeats: int = 100) -> float:
    inputs = [torch.randn(rows, shape[1]) for shape in shapes]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for i, x in enumerate(inputs):
            product(i, x)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def onednn(weights_read):
    return lambda i, x: torch.ops.mkldnn._linear_pointwise(
        x, weights_read[i], biases[i], "none", [], ""
    )


routes = {
    "onednn packed64": onednn(packed[64]),
    "onednn packed4": onednn(packed[4]),
    "onednn packed1": onednn(packed[1]),
    "onednn plain": onednn(weights),
    "mkl xW^T": lambda i, x: torch.nn.functional.linear(x, weights[i], biases[i]),
    "mkl Wx^T": lambda i, x: torch.addmm(biases[i][:, None], weights[i], x.t()).t(),
}
for name, product in routes.items():
    print(f"{name:18s} {ms_per_cycle(product):.3f} ms per 19 products")
print("weights MB", sum(w.numel() for w in weights) * 4 / 1e6)
