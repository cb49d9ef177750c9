"""Float32 matrix products on this CPU: torch's default (MKL's sgemm) against oneDNN, as
`transduce.models.matmul` calls it, at the shapes of training and decoding the `small` model.

    python benchmarks/cpu_matmul.py [--threads 2] [--out results.json]

Training: a batch of 4,096 target tokens through each kind of layer, forward and backward
(three products). Decoding: one beam-search step, forward only, at 256 rows (64 sentences x
beam 4), 64 and 4 (batch 1), with plain and with prepacked weights. Prints GFLOP/s and the
ratio, best of 10 after 3 warm-up runs. Run it on a new CPU to see whether the oneDNN route
pays there (transduce takes it except on Intel's CPUs, for training only beside AVX-512;
TRANSDUCE_CPU_MATMUL=torch or =onednn chooses).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from transduce.models import matmul
from transduce.runtime import keep_freed_memory

D_MODEL, D_FF, VOCAB = 256, 1024, 8000
LAYERS = {  # (in, out) of each kind of product in the model
    "attention projection": (D_MODEL, D_MODEL),
    "FFN in": (D_MODEL, D_FF),
    "FFN out": (D_FF, D_MODEL),
    "output projection": (D_MODEL, VOCAB),
}


def best_seconds(run, repeats: int = 10) -> float:
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def training_row(rows: int, n_in: int, n_out: int) -> dict[str, float]:
    x = torch.randn(rows, n_in, requires_grad=True)
    weight = torch.randn(n_out, n_in, requires_grad=True)
    grad = torch.randn(rows, n_out)
    flops = 3 * 2 * rows * n_in * n_out
    rates = {}
    for name, product in (("mkl", F.linear), ("onednn", matmul.linear)):
        seconds = best_seconds(lambda product=product: product(x, weight).backward(grad))
        rates[name] = flops / seconds / 1e9
    return rates


def decoding_row(rows: int, n_in: int, n_out: int) -> dict[str, float]:
    x, layer = torch.randn(rows, n_in), matmul.Linear(n_in, n_out, bias=False)
    flops = 2 * rows * n_in * n_out
    rates = {}
    with torch.no_grad():
        rates["mkl"] = flops / best_seconds(lambda: F.linear(x, layer.weight)) / 1e9
        rates["onednn"] = flops / best_seconds(lambda: layer(x)) / 1e9
        with matmul.packed_for_inference():
            rates["onednn packed"] = flops / best_seconds(lambda: layer(x)) / 1e9
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not matmul._available:
        raise SystemExit("this torch has no oneDNN linear operator")
    matmul.use_onednn(True)  # whatever this CPU's default route: both are measured
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    torch.manual_seed(0)
    results = []
    print("| use | product (in x out) | rows | MKL GFLOP/s | oneDNN | packed | oneDNN / MKL |")
    print("|---|---|---|---|---|---|---|")
    cases = [("training", 4096)] + [("decoding", rows) for rows in (256, 64, 4)]
    for use, rows in cases:
        for name, (n_in, n_out) in LAYERS.items():
            row = training_row if use == "training" else decoding_row
            rates = row(rows, n_in, n_out)
            best_onednn = max(v for k, v in rates.items() if k != "mkl")
            packed = rates.get("onednn packed")
            print(
                f"| {use} | {name} ({n_in} x {n_out}) | {rows} | {rates['mkl']:.0f} "
                f"| {rates['onednn']:.0f} | {'-' if packed is None else f'{packed:.0f}'} "
                f"| {best_onednn / rates['mkl']:.2f}x |",
                flush=True,
            )
            shape = {"in": n_in, "out": n_out, "rows": rows}
            results.append({"use": use, "product": name, **shape, "gflops": rates})
    if args.out:
        meta = {"torch": torch.__version__, "threads": args.threads, "date": time.strftime("%F")}
        args.out.write_text(json.dumps({**meta, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
