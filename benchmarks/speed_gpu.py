"""GPU training speed of the paper's presets: bf16 target tokens/s and model FLOP utilisation.

    python benchmarks/speed_gpu.py (--prepared DATA | --wmt-lengths) --out results.json \
        [--presets base big] [--updates 60] [--max-tokens 25000] [--precisions auto fp32] \
        [--compile auto off]

Runs the Trainer's own update (collate, forward, loss, backward, fused Adam) on the first
`--updates` batches of epoch 0 of a prepared dataset, or of synthetic pairs with WMT14 en-de's
lengths and the paper's 37,000 vocabulary (`--wmt-lengths`, wmt_lengths.py), the first
`--warmup` left out (the compiled layers compile there), and reports target tokens/s, the time
the CPU spends collating, peak GPU memory and MFU: model FLOP/s over the GPU's dense bf16 peak
from its datasheet and over a bf16 matrix product measured in the same run. Model FLOPs are
counted two ways: 6 x parameters per target token (the count the CPU figures use), and the
products the model does on the real (unpadded) tokens, attention's included, times 3 for the
backward (`exact`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch.nn.attention import SDPBackend

from transduce.config import override
from transduce.data.dataset import PreparedData
from transduce.models import attention, count_parameters
from transduce.models.matmul import linear
from transduce.presets import preset
from transduce.training import loss as loss_module
from transduce.training.loop import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wmt_lengths import synthesize

DATASHEET_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}  # dense, SXM parts


def measured_matmul_tflops(n: int = 8192, repeats: int = 10) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize()
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e12


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def datasheet_tflops() -> float | None:
    name = torch.cuda.get_device_name()
    return next((peak for chip, peak in DATASHEET_BF16_TFLOPS.items() if chip in name), None)


SDPA_BACKENDS = {
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}


def choose_attention_kernel(name: str | None) -> None:
    """The model's own choice of fused attention kernels on a GPU (all but cuDNN's), or the one
    named. Set in the model's code rather than around the call, so that the compiled layers
    trace it (an `sdpa_kernel` around them would be overridden by the model's own)."""
    if name in SDPA_BACKENDS:
        attention.GPU_KERNELS = attention.GPU_KERNELS_TRAINING = [SDPA_BACKENDS[name]]


def loss_of_whole_logits(hidden, weight, target, eps: float, pad: int, fused: bool = False):
    """The loss as the GPU took it before session 27 (`--loss-form logits`): the (tokens x V)
    logits whole, then the compiled sums and their backward, one pass over the logits each."""
    logits = linear(hidden, weight)
    return loss_module.label_smoothed_loss(logits, target, eps, pad, fused)


def forward_flops(model, src_lengths, tgt_lengths) -> float:
    """Multiply-adds x 2 of the Transformer's forward on pairs of these lengths, no padding."""
    c = model.config
    d, n = c.d_model, c.n_layers
    qk, v = c.h * c.d_k, c.h * c.d_v
    s, t = float(sum(src_lengths)), float(sum(tgt_lengths))
    s2 = float(sum(x * x for x in src_lengths))
    t2 = float(sum(x * x for x in tgt_lengths)) / 2  # causal: half the scores
    st = float(sum(a * b for a, b in zip(src_lengths, tgt_lengths, strict=True)))
    projections = 2 * qk + 2 * v  # q, k (d x qk), v and the output (d x v), per d
    ffn = 2 * c.d_ff
    encoder = n * (s * d * (projections + ffn) + s2 * (qk + v))
    decoder_self = t * d * projections + t2 * (qk + v)
    cross = t * d * (qk + v) + s * d * (qk + v) + st * (qk + v)
    decoder = n * (decoder_self + cross + t * d * ffn)
    return 2 * (encoder + decoder + t * d * c.vocab_size)


def update_flops(model, split, group: list[list[int]]) -> float:
    """Forward and backward (3x the forward) of one update's pairs. The encoder reads each source
    and eos, the decoder bos and the target, predicting the target and eos: one more each."""
    (indices,) = group
    src, tgt = split.src_lengths[indices] + 1, split.tgt_lengths[indices] + 1
    return 3 * forward_flops(model, src.tolist(), tgt.tolist())


def src_padding(split, groups: list[list[list[int]]]) -> dict:
    """The share of source positions that are padding, and of batches with any."""
    batches = [split.src_lengths[indices] + 1 for group in groups for indices in group]
    padded = sum(int(b.max()) * len(b) for b in batches)
    real = sum(int(b.sum()) for b in batches)
    return {
        "positions": 1 - real / padded,
        "batches": sum(int(b.min() != b.max()) for b in batches) / len(batches),
    }


def measure(data: PreparedData, name: str, precision: str, compile: str, args) -> dict:
    settings = {
        "data.max_tokens": str(args.max_tokens),
        "train.precision": precision,
        "train.compile": compile,
        "train.log_every": "1000000",
    }
    if args.one_source_length is not None:  # else the preset's
        settings["data.one_source_length"] = str(args.one_source_length)
    config = override(preset(name), settings)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # cpu: a dry run
    # Each preset compiles afresh: one run after another in a process met the first one's
    # compiled graphs and their guards, and `base`, bound by the host, ran 1.2-1.7x slower
    # second than first (SPEED.md, GPU, session 27).
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as run:
        trainer = Trainer(config, data, Path(run), resume=False, device=device)
        batches = trainer.epochs.sampler(0).batches(0)  # repeated if the epoch is shorter
        groups = [[batches[i % len(batches)]] for i in range(args.updates)]
        warmup = args.warmup
        if args.seen_shapes:  # the timed updates repeat the warm-up's batches
            seen = groups[:warmup]
            # Inductor's CUDA-graph trees run a shape's first call as written, record on its
            # second and replay from its third: two passes before the clock.
            passes = 2 if args.cuda_graphs else 1
            repeats = [seen[i % len(seen)] for i in range(args.updates - warmup)]
            groups, warmup = seen * passes + repeats, warmup * passes
        split = trainer.data.split("train")
        collate_start = time.perf_counter()
        for (indices,) in groups:
            trainer._collate(split.pairs(indices))  # the host's share, timed on its own
        synchronize()
        collate_seconds = time.perf_counter() - collate_start
        group_flops = [update_flops(trainer.model, split, g) for g in groups]  # before the clock
        padding = src_padding(split, groups)
        groups = [[split.pairs(indices) for indices in group] for group in groups]
        tokens, flops, start = 0, 0.0, 0.0
        compiling = []  # the host seconds of timed updates that compiled a graph
        warm_start = time.perf_counter()
        for i, group in enumerate(groups):
            if i == warmup:
                synchronize()
                warmup_seconds = time.perf_counter() - warm_start
                tokens, flops, start = 0, 0.0, time.perf_counter()
            if args.cuda_graphs:  # a new iteration: the last one's graph outputs may be reused
                torch.compiler.cudagraph_mark_step_begin()
            graphs, update_start = counters["stats"]["unique_graphs"], time.perf_counter()
            tokens += trainer._update(group, rate=1e-4).tgt_tokens
            if i >= warmup and counters["stats"]["unique_graphs"] > graphs:
                compiling.append(time.perf_counter() - update_start)
            flops += group_flops[i]
            if args.sync_each_update:  # the host waits for the GPU's queue to drain, as the
                synchronize()  # update did before session 23 (counted tokens on the GPU)
        synchronize()
        seconds = time.perf_counter() - start
        if args.profile:
            profile(trainer, groups[:warmup][-5:])
        if args.profile_fresh:  # batches of shapes not seen yet (the next of the epoch)
            fresh = batches[args.updates : args.updates + 5]
            profile(trainer, [[split.pairs(indices)] for indices in fresh])
        parameters = count_parameters(trainer.model)
    timed = len(groups) - warmup
    return {
        "preset": name,
        "precision": "bf16 autocast" if precision == "auto" else precision,
        "sdpa_backend": args.sdpa or "default",
        "compile": compile,
        "compiled": trainer.compiled,
        "sync_each_update": args.sync_each_update,
        "seen_shapes": args.seen_shapes,
        "cuda_graphs": args.cuda_graphs,
        "loss_form": args.loss_form,
        "stacked_products": args.stacked_products,
        "inductor": args.inductor,
        "one_source_length": config.data.one_source_length,
        "source_mask": args.source_mask,
        "src_padding": padding,
        "warmup_seconds": warmup_seconds,
        "parameters": parameters,
        "updates_timed": timed,
        "target_tokens_per_update": round(tokens / timed),
        "target_tokens_per_s": round(tokens / seconds),
        "seconds_per_update": seconds / timed,
        # A new shape can fail a compiled graph's guards (a single sentence, a length divisible
        # by 8, few tokens) and compile it again, seconds of the host's time that a long run
        # pays once per kind of shape: the rate of the timed updates that compiled nothing
        # (their host time, the GPU's queue drained while it compiled; SPEED.md, session 37).
        "timed_updates_compiling": len(compiling),
        "seconds_per_update_not_compiling": (seconds - sum(compiling))
        / max(timed - len(compiling), 1),
        "collate_seconds_per_update": collate_seconds / len(groups),
        "model_tflops": 6 * parameters * tokens / seconds / 1e12,
        "exact_model_tflops": flops / seconds / 1e12,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30
        if device.type == "cuda"
        else 0,
    }


def profile(trainer: Trainer, groups: list) -> None:
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profiler:
        for group in groups:
            trainer._update(group, rate=1e-4)
        synchronize()
    tables = (("cuda_time_total", 25), ("self_cuda_time_total", 60), ("cpu_time_total", 25))
    for key, rows in tables:  # the second: each kernel by its own GPU time
        table = profiler.key_averages().table(sort_by=key, row_limit=rows, max_name_column_width=60)
        print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prepared", type=Path)
    source.add_argument("--wmt-lengths", action="store_true", help="synthetic WMT14-like pairs")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--presets", nargs="+", default=["base", "big"])
    parser.add_argument("--precisions", nargs="+", default=["auto"], choices=["auto", "fp32"])
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=25000)
    parser.add_argument("--warmup", type=int, default=20, help="updates not timed")
    parser.add_argument("--compile", nargs="+", default=["auto"], choices=["auto", "on", "off"])
    parser.add_argument("--sdpa", choices=["default", *SDPA_BACKENDS])
    parser.add_argument(
        "--loss-form",
        choices=["chunked", "logits"],
        default="chunked",
        help="the loss in compiled chunks (the Trainer's) or of the whole logits (before)",
    )
    parser.add_argument(
        "--stacked-products",
        choices=["on", "off"],
        default="on",
        help="attention's projections of one input as one product of stacked weights (the "
        "Trainer's) or one product per layer (before)",
    )
    parser.add_argument(
        "--inductor",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="Inductor settings for the run, e.g. coordinate_descent_tuning=True",
    )
    parser.add_argument(
        "--pairs", type=int, default=100_000, help="synthetic pairs (WMT14 en-de has 4.5M)"
    )
    lengths = parser.add_mutually_exclusive_group()  # neither: the preset's batches
    lengths.add_argument(
        "--one-source-length",
        action="store_const",
        const=True,
        help="batches of one source length each (data.one_source_length; the paper's presets)",
    )
    lengths.add_argument(
        "--mixed-source-lengths",
        dest="one_source_length",
        action="store_const",
        const=False,
        help="batches of sources of several lengths, padded",
    )
    parser.add_argument(
        "--source-mask",
        choices=["when-padded", "always"],
        default="when-padded",
        help="the source mask left out where no source is padded (the Trainer's on a GPU, "
        "loss.MASK_FREE_DEVICES), or always given",
    )
    parser.add_argument("--profile", action="store_true", help="print the top operators")
    parser.add_argument("--profile-fresh", action="store_true", help="the same, on new shapes")
    parser.add_argument(
        "--sync-each-update", action="store_true", help="drain the GPU's queue after each update"
    )
    parser.add_argument(
        "--seen-shapes", action="store_true", help="time batches of shapes seen in the warm-up"
    )
    parser.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="the compiled layers and sums replayed as CUDA graphs, one per batch shape "
        "(torch.compile's reduce-overhead mode; an experiment, not a setting of the Trainer)",
    )
    args = parser.parse_args()
    if args.cuda_graphs:
        inductor_config.triton.cudagraphs = True
    for setting in args.inductor:
        key, value = setting.split("=", 1)
        setattr(inductor_config, key, {"True": True, "False": False}.get(value, value))
    scratch = tempfile.TemporaryDirectory()
    prepared = args.prepared or synthesize(Path(scratch.name) / "wmt", pairs=args.pairs)
    if args.source_mask == "always":
        loss_module.MASK_FREE_DEVICES = set()
    data = PreparedData.load(prepared)
    on_gpu = torch.cuda.is_available()
    matmul = measured_matmul_tflops() if on_gpu else float("nan")
    datasheet = datasheet_tflops() if on_gpu else None
    choose_attention_kernel(args.sdpa)
    attention.STACKED_TRAINING_DEVICES = {"cuda"} if args.stacked_products == "on" else set()
    if args.loss_form == "logits":
        loss_module.projected_label_smoothed_loss = loss_of_whole_logits
    rows = []
    for name in args.presets:
        for precision, compile in itertools.product(args.precisions, args.compile):
            try:
                row = measure(data, name, precision, compile, args)
            except Exception as error:  # one failing setting (a compile error) spares the rest
                print(f"{name} {precision} compile={compile}: {error!r}", flush=True)
                continue
            for count in ("", "exact_"):
                tflops = row[f"{count}model_tflops"]
                row[f"{count}mfu_datasheet"] = tflops / datasheet if datasheet else None
                row[f"{count}mfu_measured_matmul"] = tflops / matmul
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": torch.cuda.get_device_name() if on_gpu else "cpu (a dry run)",
        "torch": torch.__version__,
        "bf16_matmul_tflops_measured": matmul,
        "bf16_tflops_datasheet": datasheet,
        "max_tokens": args.max_tokens,
        "data": str(args.prepared) if args.prepared else data.meta["description"],
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"bf16 matmul {matmul:.0f} TFLOP/s measured, {datasheet} datasheet")
    for r in rows:
        print(
            f"{r['preset']:5s} {r['precision']:13s} compiled={r['compiled']!s:5s} "
            f"sync={r['sync_each_update']!s:5s} seen={r['seen_shapes']!s:5s} "
            f"graphs={r['cuda_graphs']!s:5s} one-src-len={r['one_source_length']!s:5s} "
            f"src-mask={r['source_mask']} src-pad {r['src_padding']['positions']:.1%} "
            f"{r['target_tokens_per_s']:>9,} tgt tok/s  "
            f"{r['model_tflops']:6.1f} TFLOP/s  MFU {r['mfu_datasheet'] or 0:.1%} "
            f"({r['mfu_measured_matmul']:.1%} of measured; "
            f"exact {r['exact_mfu_datasheet'] or 0:.1%})"
            f"  warm-up {r['warmup_seconds']:.0f} s  collate "
            f"{r['collate_seconds_per_update'] * 1e3:.1f} ms of {r['seconds_per_update'] * 1e3:.1f}"
            f" ms/update  peak {r['peak_memory_gib']:.1f} GiB  compiling in "
            f"{r['timed_updates_compiling']} timed "
            f"({r['seconds_per_update_not_compiling'] * 1e3:.1f} ms/update without them)"
        )


if __name__ == "__main__":
    main()
