"""Why `big` without a source mask ran 17x slower on an H200 (session 29), in seconds of GPU time.

Session 29's `big` update took 1.47 s mask-free against 88 ms masked, steadily, while `base`
mask-free was level; a run without a mask on the CPU recompiled nothing (session 30). This probe
times the pieces instead of whole updates, forward and backward, bf16, at 25,000-token shapes of
WMT lengths, each case on shapes new to it (as training meets them):

1. `scaled_dot_product_attention` alone, as the model calls it (heads as strided views of one
   stacked product, `GPU_KERNELS`), with the padding mask and without, h = 8 (`base`) and
   16 (`big`), self- and cross-attention; and which kernels accept each case.
2. One encoder and one decoder layer of `base` and `big`, eager and compiled as the Trainer
   compiles them (`compile_layers`), with the mask and without.

    python benchmarks/runs/speed/gpu/s30-attention-probe.py [--dry]   # --dry: small, on the CPU
Prints one line per case: milliseconds per call (median), and the kernels that took it.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch.nn.attention import SDPBackend, sdpa_kernel

from transduce.config import TransformerConfig
from transduce.models.attention import GPU_KERNELS
from transduce.models.cache import LayerCache
from transduce.models.transformer import DecoderLayer, EncoderLayer
from transduce.training.compiled import _compiled_when_training

TOKENS = 25_000
LENGTHS = [(27, 29), (31, 30), (12, 14), (64, 70), (5, 7), (45, 41)]  # (source, target)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return (time.perf_counter() - start) * 1e3


def heads(x: torch.Tensor, h: int, parts: int) -> list[torch.Tensor]:
    """(B, T, parts * h * 64) -> `parts` (B, h, T, 64) strided views, as the model's products."""
    n, length, _ = x.shape
    return [p.view(n, length, h, -1).transpose(1, 2) for p in x.chunk(parts, dim=-1)]


def attention_case(h, d, source, target, cross, masked, device, dtype):
    rows = max(1, TOKENS // max(source, target))
    queries = target if cross else source
    q_in = torch.randn(rows, queries, (1 if cross else 3) * h * d, device=device, dtype=dtype)
    q_in.requires_grad_(True)
    kv_in = torch.randn(rows, source, 2 * h * d, device=device, dtype=dtype, requires_grad=True)
    if cross:
        (q,), (k, v) = heads(q_in, h, 1), heads(kv_in, h, 2)
    else:
        q, k, v = heads(q_in, h, 3)
    mask = torch.ones(rows, 1, 1, source, dtype=torch.bool, device=device) if masked else None
    return q, k, v, mask


def attention_step(q, k, v, mask) -> None:
    with sdpa_kernel(GPU_KERNELS):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out.float().sum().backward()


def layers_step(encode, decode, decoder, src, tgt, mask, dtype) -> None:
    """One encoder layer over the sources, one decoder layer attending to it, and back."""
    with torch.autocast(src.device.type, dtype=dtype):
        memory, _ = encode(src, mask)
        k, v = decoder.cross_attn.project_kv(memory)
        out, _, _ = decode(tgt, LayerCache(k, v), mask)
    out.float().sum().backward()


def accepted(q, k, v, mask) -> list[str]:
    names = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            names.append(backend.name.split("_")[0].lower())
        except RuntimeError:
            pass
    return names


def probe_attention(device, dtype, d) -> None:
    for h in (8, 16):
        for cross in (False, True):
            for masked in (True, False):
                times, kernels = [], set()
                for source, target in LENGTHS:
                    q, k, v, mask = attention_case(
                        h, d, source, target, cross, masked, device, dtype
                    )
                    times.append(timed(functools.partial(attention_step, q, k, v, mask), device))
                    kernels.update(accepted(q.detach(), k.detach(), v.detach(), mask))
                kind = "cross" if cross else "self"
                print(f"sdpa h={h} {kind:5} mask={'yes' if masked else 'no ':3} "
                      f"{statistics.median(times[1:]):8.2f} ms (first {times[0]:.1f}) "
                      f"kernels that accept it: {sorted(kernels)}", flush=True)  # fmt: skip


def probe_layers(device, dtype, sizes: dict[str, TransformerConfig]) -> None:
    for name, config in sizes.items():
        encoder, decoder = EncoderLayer(config).to(device), DecoderLayer(config).to(device)
        for compiled in (False, True):
            enc, dec = encoder.forward, decoder.forward
            if compiled:
                enc = _compiled_when_training(encoder, encoder.forward)
                dec = _compiled_when_training(decoder, decoder.forward)
            for masked in (True, False):
                times = []
                for source, target in LENGTHS:
                    rows = max(1, TOKENS // max(source, target))
                    src = torch.randn(rows, source, config.d_model, device=device)
                    tgt = torch.randn(rows, target, config.d_model, device=device)
                    mask = (
                        torch.ones(rows, 1, 1, source, dtype=torch.bool, device=device)
                        if masked
                        else None
                    )
                    step = functools.partial(layers_step, enc, dec, decoder, src, tgt, mask, dtype)
                    times.append(timed(step, device))
                print(f"layers {name:4} {'compiled' if compiled else 'eager   '} "
                      f"mask={'yes' if masked else 'no ':3} {statistics.median(times[2:]):8.2f} ms"
                      f" (first two {times[0]:.0f}, {times[1]:.0f}; graphs so far "
                      f"{counters['stats']['unique_graphs']})", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry", action="store_true", help="small shapes on the CPU")
    args = parser.parse_args()
    global TOKENS  # the dry run's smaller shapes
    if args.dry or not torch.cuda.is_available():
        device, dtype, TOKENS = torch.device("cpu"), torch.bfloat16, 200
        LENGTHS[:] = LENGTHS[:3]
        sizes = {"base": TransformerConfig(d_model=64, d_ff=128, h=8, d_k=8, d_v=8),
                 "big": TransformerConfig(d_model=128, d_ff=256, h=16, d_k=8, d_v=8)}  # fmt: skip
        d = 8
    else:
        device, dtype, d = torch.device("cuda"), torch.bfloat16, 64
        sizes = {"base": TransformerConfig(d_model=512, d_ff=2048, h=8, dropout=0.1),
                 "big": TransformerConfig(d_model=1024, d_ff=4096, h=16, dropout=0.3)}  # fmt: skip
        print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    probe_attention(device, dtype, d)
    probe_layers(device, dtype, sizes)


if __name__ == "__main__":
    main()
