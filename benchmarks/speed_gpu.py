"""GPU training speed of the paper's presets: bf16 target tokens/s and model FLOP utilisation.

    python benchmarks/speed_gpu.py --prepared DATA --out results.json \
        [--presets base big] [--updates 60] [--max-tokens 25000] [--precisions auto fp32]

Runs the Trainer's own update (collate, forward, loss, backward, fused Adam) on the first
`--updates` batches of epoch 0 of a prepared dataset, the first 10 left out as warm-up, and
reports target tokens/s, the time the CPU spends collating, peak GPU memory and MFU: model
FLOP/s, counted as 6 x parameters per target token (the count the CPU figures use; attention's
own products are left out, small at these sentence lengths), over the GPU's dense bf16 peak
from its datasheet and over a bf16 matrix product measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from transduce.config import override
from transduce.data.dataset import PreparedData
from transduce.models import count_parameters
from transduce.presets import preset
from transduce.training.loop import Trainer

DATASHEET_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}  # dense, SXM parts


def measured_matmul_tflops(n: int = 8192, repeats: int = 10) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e12


def datasheet_tflops() -> float | None:
    name = torch.cuda.get_device_name()
    return next((peak for chip, peak in DATASHEET_BF16_TFLOPS.items() if chip in name), None)


SDPA_BACKENDS = {
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}


def attention_kernel(name: str | None):
    """PyTorch's own choice of fused attention kernel, or the one named."""
    return sdpa_kernel([SDPA_BACKENDS[name]]) if name in SDPA_BACKENDS else nullcontext()


def measure(data: PreparedData, name: str, precision: str, args) -> dict:
    settings = {
        "data.max_tokens": str(args.max_tokens),
        "train.precision": precision,
        "train.log_every": "1000000",
    }
    config = override(preset(name), settings)
    torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as run:
        trainer = Trainer(config, data, Path(run), resume=False, device=torch.device("cuda"))
        batches = trainer.sampler.batches(0)  # repeated if the epoch is shorter than asked
        groups = [[batches[i % len(batches)]] for i in range(args.updates)]
        if args.compile:
            trainer.network = torch.compile(trainer.model, dynamic=True)
        collate_start = time.perf_counter()
        for (indices,) in groups:
            trainer._collate(trainer.data.split("train").pairs(indices))
        torch.cuda.synchronize()
        collate_seconds = time.perf_counter() - collate_start
        tokens, start = 0, 0.0
        for i, group in enumerate(groups):
            if i == args.warmup:
                torch.cuda.synchronize()
                tokens, start = 0, time.perf_counter()
            tokens += trainer._update(group).tgt_tokens
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        if args.profile:
            profile(trainer, groups[:5])
        parameters = count_parameters(trainer.model)
    timed = len(groups) - args.warmup
    return {
        "preset": name,
        "precision": "bf16 autocast" if precision == "auto" else precision,
        "sdpa_backend": args.sdpa or "default",
        "compiled": args.compile,
        "parameters": parameters,
        "updates_timed": timed,
        "target_tokens_per_update": round(tokens / timed),
        "target_tokens_per_s": round(tokens / seconds),
        "seconds_per_update": seconds / timed,
        "collate_seconds_per_update": collate_seconds / len(groups),
        "model_tflops": 6 * parameters * tokens / seconds / 1e12,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def profile(trainer: Trainer, groups: list) -> None:
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profiler:
        for group in groups:
            trainer._update(group)
        torch.cuda.synchronize()
    for key in ("cuda_time_total", "cpu_time_total"):
        print(profiler.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--presets", nargs="+", default=["base", "big"])
    parser.add_argument("--precisions", nargs="+", default=["auto"], choices=["auto", "fp32"])
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=25000)
    parser.add_argument("--warmup", type=int, default=20, help="updates not timed")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--sdpa", choices=["default", *SDPA_BACKENDS])
    parser.add_argument("--profile", action="store_true", help="print the top operators")
    args = parser.parse_args()
    data = PreparedData.load(args.prepared)
    matmul = measured_matmul_tflops()
    datasheet = datasheet_tflops()
    rows = []
    for name in args.presets:
        for precision in args.precisions:
            with attention_kernel(args.sdpa):
                row = measure(data, name, precision, args)
            row["mfu_datasheet"] = row["model_tflops"] / datasheet if datasheet else None
            row["mfu_measured_matmul"] = row["model_tflops"] / matmul
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "bf16_matmul_tflops_measured": matmul,
        "bf16_tflops_datasheet": datasheet,
        "max_tokens": args.max_tokens,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"bf16 matmul {matmul:.0f} TFLOP/s measured, {datasheet} datasheet")
    for r in rows:
        print(
            f"{r['preset']:5s} {r['precision']:13s} {r['target_tokens_per_s']:>9,} tgt tok/s  "
            f"{r['model_tflops']:6.1f} TFLOP/s  MFU {r['mfu_datasheet'] or 0:.1%} "
            f"({r['mfu_measured_matmul']:.1%} of measured)  collate "
            f"{r['collate_seconds_per_update'] * 1e3:.1f} ms of {r['seconds_per_update'] * 1e3:.1f}"
            f" ms/update  peak {r['peak_memory_gib']:.1f} GiB"
        )


if __name__ == "__main__":
    main()
