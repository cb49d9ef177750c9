"""Training-step throughput of one preset on prepared data, for A/B trials of a change.

    python benchmarks/train_step.py --prepared DATA --preset small [--updates 60] [--timed N]
        [--threads 2] [--set key=value ...] [--logits-loss] [--peak GFLOPS] [--profile]
        [--mmap-mib M]

Runs the first `--updates` batches (epoch 0's, then the next epochs') through the Trainer's own
update (forward, loss, backward, Adam) and prints target tokens/s over all but the first 10
updates (or over the last `--timed`: later epochs meet batch shapes seen before), and the share of
target positions that are padding, and the process's peak resident memory. `--logits-loss`
scores through the (tokens x V) logits as before the chunked loss (training/loss.py), for A/B.
`--peak` (the host's float32 matrix peak, from `cpu_matmul.py`) adds model FLOP utilisation:
6 x parameters FLOP per target token over the peak. `--profile` times the same updates again
under torch.profiler and prints where they go by kind of operation and phase (op_profile.py).
`--mmap-mib` has glibc map blocks of M MiB and more and unmap them when freed, instead of keeping
every freed block in the heap (`runtime.keep_freed_memory`): the memory trial of MEMORY.md.
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import tempfile
import time
from pathlib import Path

import op_profile
import torch

from transduce.config import override
from transduce.data.dataset import PreparedData
from transduce.presets import preset
from transduce.runtime import keep_freed_memory, pick_device
from transduce.training.loop import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared", type=Path, required=True)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timed", type=int, default=0, help="time the last N (0: all but 10)")
    parser.add_argument("--set", nargs="*", default=[])
    parser.add_argument("--logits-loss", action="store_true", help="the loss before chunking")
    parser.add_argument("--peak", type=float, default=0.0, help="GFLOP/s, for utilisation")
    parser.add_argument("--profile", action="store_true", help="then profile the timed updates")
    parser.add_argument("--mmap-mib", type=int, default=0, help="map blocks of this size and up")
    args = parser.parse_args()
    if args.mmap_mib:
        _map_blocks_from(args.mmap_mib)
    if args.logits_loss:
        import transduce.training.step as step_module
        from transduce.training.loss import label_smoothed_loss

        def logits_loss(network, batch, eps, pad):
            logits = network(batch.src, batch.tgt_in)
            return label_smoothed_loss(logits, batch.tgt_out, eps, pad)

        step_module.model_loss = logits_loss
    settings = dict(item.split("=", 1) for item in args.set)
    config = override(preset(args.preset), {"train.threads": str(args.threads), **settings})
    with tempfile.TemporaryDirectory() as run:
        data, device = PreparedData.load(args.prepared), pick_device("cpu")
        trainer = Trainer(config, data, Path(run), resume=False, device=device)
        epochs = itertools.chain.from_iterable(trainer.epochs.batches(e) for e in itertools.count())
        groups = [[pairs] for pairs in itertools.islice(epochs, args.updates)]
        padding = real = 0
        for (pairs,) in groups:
            batch = trainer._collate(pairs)
            real += batch.n_tgt_tokens
            padding += batch.tgt_out.numel() - batch.n_tgt_tokens
        first_timed = len(groups) - args.timed if args.timed else 10
        if not 0 <= first_timed < len(groups):
            parser.error(f"--timed {args.timed} of --updates {args.updates}: none to time")
        tokens, seconds = _timed_updates(trainer, groups, first_timed)
        parameters = sum(p.numel() for p in trainer.network.parameters())
        profile = _profiled_updates(trainer, groups[first_timed:]) if args.profile else None
    rate = tokens / seconds
    print(
        f"{args.preset} {' '.join(args.set)}: {rate:,.0f} target tokens/s over "
        f"{len(groups) - first_timed} updates; "
        f"target padding {padding / (padding + real):.1%}; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"{'logits' if args.logits_loss else 'chunked'} loss; peak resident {_peak_mib():,} MiB"
    )
    model_gflops = 6 * parameters * rate / 1e9
    utilisation = f", {model_gflops / args.peak:.1%} of the peak {args.peak:g}" if args.peak else ""
    print(f"{parameters:,} parameters: model {model_gflops:.1f} GFLOP/s{utilisation}")
    if profile:
        print(profile)


def _timed_updates(trainer: Trainer, groups: list, first_timed: int) -> tuple[int, float]:
    """Runs every group; returns the target tokens and seconds of those from `first_timed` on."""
    tokens, start = 0, time.perf_counter()
    for i, group in enumerate(groups):
        if i == first_timed:
            tokens, start = 0, time.perf_counter()
        tokens += trainer._update(group, trainer._rate(0.0)).tgt_tokens
    return tokens, time.perf_counter() - start


def _profiled_updates(trainer: Trainer, groups: list) -> str:
    """The same updates again (their shapes now seen before) under the profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        start = time.perf_counter()
        for group in groups:
            trainer._update(group, trainer._rate(0.0))
        seconds = time.perf_counter() - start
    updates = len(groups)
    by_kind = op_profile.table(profiler, updates, seconds)
    return f"{by_kind}\n\n{op_profile.top_operators(profiler, updates)}"


def _map_blocks_from(mib: int) -> None:
    """glibc's mmap threshold at `mib` MiB, set after the project's own (1 GiB) so it wins."""
    keep_freed_memory()
    if not ctypes.CDLL(None).mallopt(-3, mib << 20):  # M_MMAP_THRESHOLD
        raise SystemExit("mallopt failed: --mmap-mib needs glibc")


def _peak_mib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) // 1024


if __name__ == "__main__":
    main()
