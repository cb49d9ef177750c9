"""Table 1 of the paper, measured: per layer type, forward time and sequential operations as the
sequence length n and the width d grow, beside the paper's complexity column.

    python benchmarks/table1.py --out benchmarks/table1 [--threads 2] [--repeats 5]

Layer types, each mapping (B, n, d) to (B, n, d) as one layer of a stack would:
- self-attention: softmax(QK^T / sqrt(d)) V over all n positions, O(n^2 d) per layer;
- recurrent: one LSTM step per position, O(n d^2), n sequential operations;
- convolutional: a width-k convolution, O(k n d^2);
- restricted self-attention: each position attends to its r neighbours on each side, O(r n d).
Self-attention is timed without its Q/K/V/O projections (the complexity column counts the
attention itself) and with them (what a layer costs: + O(n d^2)).

Writes OUT.json, OUT.md (times, fitted growth exponents against the column's) and OUT.png.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

BATCH, KERNEL, NEIGHBOURS = 8, 3, 8  # k and r of the paper's column
LENGTHS = [16, 32, 64, 128, 256, 512, 1024]
WIDTHS = [64, 128, 256, 512, 1024]
FIXED_D, FIXED_N = 256, 128


def self_attention(d: int) -> Callable[[Tensor], tuple[Tensor, int]]:
    def run(x: Tensor) -> tuple[Tensor, int]:
        scores = x @ x.transpose(1, 2) / math.sqrt(d)  # (B, n, n)
        return torch.softmax(scores, dim=-1) @ x, 1

    return run


def self_attention_layer(d: int) -> Callable[[Tensor], tuple[Tensor, int]]:
    q, k, v, o = (nn.Linear(d, d) for _ in range(4))

    def run(x: Tensor) -> tuple[Tensor, int]:
        heads = torch.softmax(q(x) @ k(x).transpose(1, 2) / math.sqrt(d), dim=-1) @ v(x)
        return o(heads), 1

    return run


def recurrent(d: int) -> Callable[[Tensor], tuple[Tensor, int]]:
    cell = nn.LSTMCell(d, d)

    def run(x: Tensor) -> tuple[Tensor, int]:
        h = c = x.new_zeros(x.size(0), d)
        outputs = []
        for t in range(x.size(1)):  # one dependent step per position
            h, c = cell(x[:, t], (h, c))
            outputs.append(h)
        return torch.stack(outputs, dim=1), x.size(1)

    return run


def convolutional(d: int) -> Callable[[Tensor], tuple[Tensor, int]]:
    conv = nn.Conv1d(d, d, KERNEL, padding=KERNEL // 2)

    def run(x: Tensor) -> tuple[Tensor, int]:
        return conv(x.transpose(1, 2)).transpose(1, 2), 1

    return run


def restricted_attention(d: int) -> Callable[[Tensor], tuple[Tensor, int]]:
    width = 2 * NEIGHBOURS + 1

    def run(x: Tensor) -> tuple[Tensor, int]:
        padded = F.pad(x, (0, 0, NEIGHBOURS, NEIGHBOURS))  # (B, n + 2r, d)
        windows = padded.unfold(1, width, 1)  # (B, n, d, 2r + 1): each position's neighbours
        scores = torch.einsum("bnd,bndw->bnw", x, windows) / math.sqrt(d)
        real = F.pad(torch.ones(x.size(1)), (NEIGHBOURS, NEIGHBOURS)).unfold(0, width, 1) > 0
        scores = scores.masked_fill(~real, float("-inf"))  # no weight beyond the ends
        return torch.einsum("bnw,bndw->bnd", torch.softmax(scores, dim=-1), windows), 1

    return run


LAYERS = {
    "self-attention": (self_attention, "O(n^2 d)", (2, 1)),
    "self-attention + projections": (self_attention_layer, "O(n^2 d + n d^2)", (None, None)),
    "recurrent (LSTM)": (recurrent, "O(n d^2)", (1, 2)),
    "convolutional (k=3)": (convolutional, "O(k n d^2)", (1, 2)),
    "restricted self-attention (r=8)": (restricted_attention, "O(r n d)", (1, 1)),
}


@torch.inference_mode()
def timed(make, d: int, n: int, repeats: int) -> tuple[float, int]:
    """Median seconds of one forward pass over (BATCH, n, d), and its sequential operations."""
    torch.manual_seed(0)
    layer = make(d)
    x = torch.randn(BATCH, n, d)
    layer(x)  # warm-up
    times, steps = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        _, steps = layer(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times), steps


def slope(points: list[tuple[int, float]]) -> float:
    """The least-squares exponent of time ~ size^p over the larger half of the sizes."""
    upper = points[len(points) // 2 - 1 :]
    xs = [math.log(s) for s, _ in upper]
    ys = [math.log(t) for _, t in upper]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def measure(repeats: int) -> dict:
    results = {}
    for name, (make, column, _) in LAYERS.items():
        by_n = [(n, *timed(make, FIXED_D, n, repeats)) for n in LENGTHS]
        by_d = [(d, *timed(make, d, FIXED_N, repeats)) for d in WIDTHS]
        results[name] = {
            "column": column,
            "by_n": [{"n": n, "seconds": s, "sequential": q} for n, s, q in by_n],
            "by_d": [{"d": d, "seconds": s, "sequential": q} for d, s, q in by_d],
            "exponent_n": slope([(n, s) for n, s, _ in by_n]),
            "exponent_d": slope([(d, s) for d, s, _ in by_d]),
        }
    return results


def markdown(results: dict, machine: str) -> str:
    rows = [
        f"Machine: {machine}. Batch {BATCH}; d = {FIXED_D} while n grows, n = {FIXED_N} while d "
        "grows; medians of repeated forward passes; exponents fitted on the larger half of sizes.",
        "",
        "| layer | paper's complexity | fitted exponent of n | of d | sequential operations at "
        f"n = {LENGTHS[-1]} | ms at n = {LENGTHS[-1]}, d = {FIXED_D} |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        expected_n, expected_d = LAYERS[name][2]
        last = r["by_n"][-1]
        rows.append(
            f"| {name} | {r['column']} | {r['exponent_n']:.2f}"
            + (f" (column: {expected_n})" if expected_n else "")
            + f" | {r['exponent_d']:.2f}"
            + (f" (column: {expected_d})" if expected_d else "")
            + f" | {last['sequential']} | {last['seconds'] * 1e3:.2f} |"
        )
    return "\n".join(rows) + "\n"


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_n, by_d) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (name, r) in enumerate(results.items()):
        colour = f"C{i}"
        by_n.loglog([p["n"] for p in r["by_n"]], [p["seconds"] for p in r["by_n"]], "o-",
                    color=colour, label=f"{name}: {r['column']}")  # fmt: skip
        by_d.loglog([p["d"] for p in r["by_d"]], [p["seconds"] for p in r["by_d"]], "o-",
                    color=colour)  # fmt: skip
    by_n.set(xlabel=f"sequence length n (d = {FIXED_D})", ylabel="seconds per forward pass")
    by_d.set(xlabel=f"width d (n = {FIXED_N})")
    by_n.legend(fontsize=7, loc="upper left")
    for axis in (by_n, by_d):
        axis.grid(alpha=0.3, which="both")
    figure.suptitle("Table 1, measured: forward time per layer type")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="path prefix: OUT.json/.md/.png")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    names = [line.split(":", 1)[1].strip() for line in info.splitlines() if "model name" in line]
    cpu = names[0] if names else platform.processor()
    machine = f"{cpu}, {args.threads} threads, torch {torch.__version__}"
    results = measure(args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"machine": machine, **results}, indent=2))
    args.out.with_suffix(".md").write_text(markdown(results, machine))
    plot(results, args.out.with_suffix(".png"))
    print(markdown(results, machine))


if __name__ == "__main__":
    main()
