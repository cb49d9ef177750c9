"""The ceiling of CUDA graphs for `base` and `big` training updates, before building them.

Session 28 found `base` bound by the host on an H200 (~75 ms of host time an update against
~41 ms of GPU time); CUDA graphs replay a whole update with one launch, but only over a bounded
set of batch shapes, which bucketing buys with padding (SPEED.md, session 24: lengths padded to
multiples of 8 with rows fixed per bucket, 16% of the positions padding against 5.3%). So
graphs pay only if replaying beats the compiled update by more than ~1.2x. This probe measures
that ratio on a few fixed WMT-like shapes (25,000 target tokens, every sentence of a batch one
length, the mask given as the Trainer gives it), with the Trainer's pieces: the compiled layers
(`compile_layers`), the loss's compiled chunks (`model_loss(..., fused=True)`), bf16 autocast
and fused Adam (capturable, so the step counter lives on the GPU):

1. the compiled update as it runs today, the shapes taken in turn (host and GPU time);
2. the same update captured once per shape (`torch.cuda.graph`) and replayed in turn.

Since session 34 a GPU drops the mask of such unpadded batches (`loss.MASK_FREE_DEVICES`); the
session's own run of this probe still gave it.

    python benchmarks/runs/speed/gpu/s31-graphs-probe.py [--presets base big] [--tokens N] [--dry]
Prints ms an update and MFU of each, and their ratio. `--dry`: a small model on the CPU,
the compiled update only (graphs need a GPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from transduce.data.batching import collate
from transduce.models.transformer import Transformer
from transduce.presets import preset
from transduce.training.compiled import compile_layers
from transduce.training.loss import model_loss

PAD, BOS, EOS = 0, 2, 3
VOCAB = 37_000  # the paper's shared WMT14 en-de vocabulary
TOKENS = 25_000
SHAPES = [(24, 26), (31, 33), (44, 46), (60, 62)]  # (source, target) tokens of WMT-like pairs


def batch_of(source: int, target: int, vocab: int, device: torch.device, tokens: int):
    rows = max(1, tokens // (target + 1))
    generator = torch.Generator().manual_seed(source)
    ids = torch.randint(4, vocab, (rows, source + target), generator=generator).tolist()
    pairs = [(row[:source], row[source:]) for row in ids]
    return collate(pairs, PAD, BOS, EOS).to(device)


def update(model, optimizer, batch, device: torch.device) -> None:
    """The Trainer's update (`train_step`) without its host reading of the loss: a graph cannot
    wait for the host, and the finite-loss check would move onto the GPU (Adam's `found_inf`)."""
    with torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False):
        sums = model_loss(model, batch, 0.1, PAD, fused=device.type == "cuda")
        (sums.loss / batch.n_tgt_tokens).backward()
    optimizer.step()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_rounds(step, batches, device, rounds: int) -> tuple[float, float]:
    """Median ms an update over `rounds` passes through the shapes in turn, and the host's own
    ms an update (the time to queue it, the GPU not waited for)."""
    walls, hosts = [], []
    for _ in range(rounds):
        synchronize(device)
        start = time.perf_counter()
        for batch in batches:
            step(batch)
        queued = time.perf_counter()
        synchronize(device)
        walls.append((time.perf_counter() - start) * 1e3 / len(batches))
        hosts.append((queued - start) * 1e3 / len(batches))
    return statistics.median(walls), statistics.median(hosts)


def probe(name: str, device: torch.device, tokens: int, rounds: int) -> None:
    config = preset(name)
    model_config = dataclasses.replace(config.model, vocab_size=VOCAB)
    if device.type == "cpu":  # the dry run: the code paths, not the sizes
        model_config = dataclasses.replace(
            model_config, n_layers=2, d_model=64, d_ff=128, h=4, d_k=16, d_v=16, vocab_size=500
        )
    torch.manual_seed(0)
    model = Transformer(model_config, pad=PAD).to(device).train()
    compile_layers(model)
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=1e-4,
        betas=(0.9, 0.98),
        eps=1e-9,
        **({"fused": True, "capturable": True} if device.type == "cuda" else {}),
    )
    batches = [batch_of(s, t, model_config.vocab_size, device, tokens) for s, t in SHAPES]
    parameters = sum(p.numel() for p in model.parameters())
    flops = statistics.mean(6 * parameters * b.n_tgt_tokens for b in batches)

    def eager(batch) -> None:
        update(model, optimizer, batch, device)
        optimizer.zero_grad(set_to_none=True)

    warm_start = time.perf_counter()
    for _ in range(3):  # compiles each shape (new shapes recompile at most a few times)
        for batch in batches:
            eager(batch)
    synchronize(device)
    print(f"{name}: warm-up {time.perf_counter() - warm_start:.0f} s; shapes (rows, src, tgt) "
          f"{[(*b.src.shape, b.tgt_in.size(1)) for b in batches]}", flush=True)  # fmt: skip
    wall, host = timed_rounds(eager, batches, device, rounds)
    report(name, "compiled update", wall, host, flops, device)
    if device.type != "cuda":
        return
    try:
        graphs = capture(model, optimizer, batches, device, eager)
    except Exception as error:  # the probe's answer either way; the next preset still runs
        print(f"{name}: capture failed: {type(error).__name__}: {str(error)[:500]}", flush=True)
        return
    replays = {id(b): g for b, g in zip(batches, graphs, strict=True)}
    wall_g, host_g = timed_rounds(lambda b: replays[id(b)].replay(), batches, device, rounds)
    report(name, "CUDA graphs    ", wall_g, host_g, flops, device)
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"{name}: graphs {wall / wall_g:.2f}x the compiled update; peak {peak:.1f} GiB")


def capture(model, optimizer, batches, device, eager) -> list:
    """Each shape's update captured once, after a pass on a side stream (as PyTorch's recipe for
    whole-network capture asks, so that lazily made state is not made on the capture's stream)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for batch in batches:
            eager(batch)
    torch.cuda.current_stream().wait_stream(side)
    graphs = []
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)  # the gradients then live in the graph's pool
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            update(model, optimizer, batch, device)
        graphs.append(graph)
    return graphs


def report(name, what, wall_ms, host_ms, flops, device) -> None:
    line = f"{name:4} {what} {wall_ms:8.1f} ms an update (host {host_ms:6.1f} ms)"
    if device.type == "cuda":
        line += f"  {flops / wall_ms / 1e9:7.1f} TFLOP/s  MFU {flops / wall_ms / 1e9 / 989.4:.1%}"
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["base", "big"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=TOKENS, help="target tokens a batch")
    parser.add_argument("--dry", action="store_true", help="a small model on the CPU")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.dry
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for name in args.presets:
        torch._dynamo.reset()
        probe(name, device, args.tokens if cuda else 600, args.rounds if cuda else 1)


if __name__ == "__main__":
    main()
