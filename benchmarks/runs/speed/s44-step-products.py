"""Session 44 (issue 17): the products of one beam-search step of `small` at batch 1 (4 rows),
cycling through the step's 19 weights as decoding reads them, by route: oneDNN with weights
prepacked (what transduce takes), oneDNN plain, MKL as x W^T (`F.linear`), MKL as W x^T.

    python benchmarks/runs/speed/s44-step-products.py RUN [ROWS]
"""

import sys
import time

import torch
import torch.nn.functional as F

from transduce.decoding.translate import Translator
from transduce.models import matmul


def step_weights(model) -> list[torch.Tensor]:
    weights = []
    for layer in model.decoder_layers:
        attention, cross, ffn = layer.self_attn, layer.cross_attn, layer.ffn
        qkv = (attention.w_q, attention.w_k, attention.w_v)
        weights.append(torch.cat([projection.weight for projection in qkv]))
        weights += [attention.w_o.weight, cross.w_q.weight, cross.w_o.weight]
        weights += [ffn.w_1.weight, ffn.w_2.weight]
    return [w.detach() for w in [*weights, model.output_weight]]  # the output projection last


def main() -> None:
    torch.set_num_threads(2)
    model = Translator.load(sys.argv[1], device="cpu").model
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    weights = step_weights(model)
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, 64) for w in weights]
    xs = [torch.randn(rows, w.size(1)) for w in weights]
    routes = {
        "oneDNN packed": lambda i: matmul._onednn(xs[i], packed[i], None),
        "oneDNN plain": lambda i: matmul._onednn(xs[i], weights[i], None),
        "MKL x W^T": lambda i: F.linear(xs[i], weights[i]),
        "MKL W x^T": lambda i: torch.mm(weights[i], xs[i].t()).t().contiguous(),
    }
    for name, product in routes.items():
        for _ in range(20):
            for i in range(len(weights)):
                product(i)
        each = [0.0] * len(weights)
        repeats = 200
        for _ in range(repeats):
            for i in range(len(weights)):
                start = time.perf_counter()
                product(i)
                each[i] += time.perf_counter() - start
        layers, output = sum(each[:-1]) / repeats * 1e3, each[-1] / repeats * 1e3
        print(f"{name}: a step {layers + output:.2f} ms (layers {layers:.2f}, output {output:.2f})")


if __name__ == "__main__":
    main()
