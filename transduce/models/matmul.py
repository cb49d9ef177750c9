"""Float32 matrix products on the CPU through oneDNN instead of MKL, where that is faster.

PyTorch hands a float32 `linear` on the CPU to MKL's sgemm. MKL picks its fast kernels by CPU
vendor: on an AMD EPYC with AVX-512 it runs at 150-200 GFLOP/s on 2 threads, where oneDNN
(shipped inside PyTorch, used by its compiler for frozen CPU graphs) runs the same float32
products at 280-420 GFLOP/s, accumulating in float32 all the same (benchmarks/SPEED.md,
`benchmarks/cpu_matmul.py` measures a machine). Every product of the model's linear layers and
tied output projection goes through `linear` below, forward and backward, so training and
decoding both gain; only decoding's smallest products stay with MKL (`MKL_WEIGHT_ENTRIES`).
Where the CPU shows no AVX-512 (an AMD EPYC whose hypervisor hides it), both libraries run
AVX2 kernels and MKL's are the faster at training's shapes (`tiny`'s update 1.07-1.11x, session
32), so training's products take oneDNN only beside AVX-512; decoding keeps oneDNN's prepacked
weights there too (the output projection 1.4-4.5x MKL's). On Intel's CPUs MKL is the faster of
the two (a Xeon with AMX, session 18: training `small` 1.13x, beam search 1.06-1.17x at batch
64 and 1.5x at batch 1, whose many small products oneDNN's calls cost ~50 us each against MKL's
~18), so there the route is off (`Route`).

The route is taken only for float32 CPU tensors outside autocast and outside `torch.compile`
(whose CPU backend makes its own oneDNN calls), when this build of PyTorch has the operator;
anything else (GPUs, the float64 tests, bf16) is torch's own `F.linear`. Set
TRANSDUCE_CPU_MATMUL=torch or =onednn, or call `use_onednn`, to choose for yourself (=onednn
still leaves decoding's smallest products to MKL).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from . import bf16, bf16_decoding, int8
from .derived import CopyScope, WeightCopies, copy_of

# oneDNN keeps each product it has compiled in a cache keyed by shape, and so does ideep, its
# wrapper inside PyTorch; 1,024 entries each by default. Training's row counts change every
# update, so a cache fills with products never met again, each holding ~0.5 MiB of compiled code
# and buffers: 300 shapes of one 256 x 256 layer held 386 MiB (benchmarks/MEMORY.md, session 9).
# Worse, those blocks are made mid-update, between the activations, and outlive it: they pin the
# freed heap in pieces the next update's activations do not fit. Kept to 8 entries, a product is
# freed soon after it is compiled: training `small` peaked at 1,165-1,195 MiB against 1,566-1,611
# with 64 and 2,562 with 256, at the same speed, and decoding was faster and 100 MiB smaller (its
# row count changes as sentences finish; MEMORY.md, session 14). Both libraries read these at
# their first product, so they are set here, on import; a value the user set wins.
CACHED_PRODUCTS = 8
for _cache in bf16.CACHE_SETTINGS:
    os.environ.setdefault(_cache, str(CACHED_PRODUCTS))

# A process that only decodes (`translate`, `serve`) keeps more. A sentence at a time meets ~13
# product shapes a sentence, each used again the next: the encoder's at its length, the first
# step's at one row a sentence, the others' at the beam's width. With 8 entries each sentence
# compiled all 13 afresh (673 compilations over 50 sentences, 69 with 32): with 32 a sentence at
# a time was 1.11x as fast in one process and 1.05x in two (`decode.workers`), a batch of 64
# 1.06x and level, at the same peak memory (an AMD EPYC of Zen 4, `small`; SPEED.md, session
# 69).
DECODING_CACHED_PRODUCTS = 32


def cache_products_for_decoding() -> None:
    """Size the product caches for a process that decodes and does not train; call it before
    the process's first oneDNN product (`bf16.size_product_caches`)."""
    bf16.size_product_caches(DECODING_CACHED_PRODUCTS)


_available = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _intel_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    try:
        vendor = cpuinfo.read_text().split("vendor_id", 1)[1].split("\n", 1)[0]
    except (OSError, IndexError):  # not Linux
        return "Intel" in platform.processor()
    return "GenuineIntel" in vendor


@dataclass(frozen=True)
class Route:
    """Which float32 CPU products go through oneDNN: those with gradients (training) and those
    without (decoding, whose smallest products stay with MKL all the same)."""

    training: bool
    decoding: bool


def _route(choice: str, intel_cpu: bool, avx512: bool) -> Route:
    """TRANSDUCE_CPU_MATMUL: "onednn" (every product), "torch" (none) or "auto": decoding
    except on Intel's CPUs, training only where the CPU has AVX-512 too (SPEED.md, session 32)."""
    if choice not in ("auto", "onednn", "torch"):
        raise ValueError(f"TRANSDUCE_CPU_MATMUL must be auto, onednn or torch, not {choice!r}")
    if choice != "auto":
        return Route(training=choice == "onednn", decoding=choice == "onednn")
    return Route(training=not intel_cpu and avx512, decoding=not intel_cpu)


def _chosen_route() -> Route:
    if not _available:
        return Route(training=False, decoding=False)
    avx512 = getattr(torch.cpu, "_is_avx512_supported", lambda: False)()
    return _route(os.environ.get("TRANSDUCE_CPU_MATMUL", "auto"), _intel_cpu(), avx512)


_enabled = _chosen_route()
_can_pack = _available and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")

# Decoding's weights reordered into oneDNN's blocked layout, made on first use inside
# `packed_for_inference` (`derived.copy_of`), in the open context's store.
PackedWeights = WeightCopies[Tensor]
_packing: CopyScope[Tensor] = CopyScope()
PACKED_FOR_ROWS = 64  # the row count oneDNN tunes the layout for; 4-256 rows gain alike

# Without gradients, a product of at most this many rows by a weight of at most this many
# entries stays with MKL even where oneDNN is the route: oneDNN's call costs ~40-50 us whatever
# the size, and at decoding's 4-256 rows MKL multiplies `tiny`'s layer weights (128 x 128 to the
# stacked 128 x 384) 1.1-2.7x faster; `tiny`'s greedy decoding of the test set, as validation
# runs it on dev, took 1.23x less time (measured on an AMD EPYC with AVX2 only, the one kind of
# non-Intel CPU we had; benchmarks/SPEED.md, session 25). From `small`'s 256 x 256 at 64 rows
# up the two are level or oneDNN's packed products lead, output projections by 1.3-1.75x.
MKL_ROWS, MKL_WEIGHT_ENTRIES = 256, 50_000


def use_onednn(enabled: bool | Route) -> Route:
    """Route float32 CPU products through oneDNN (when it is available): every product (True),
    none (False), or as a `Route` says. Returns the route before, for restoring it."""
    global _enabled
    route = enabled if isinstance(enabled, Route) else Route(enabled, enabled)
    old = _enabled
    _enabled = Route(route.training and _available, route.decoding and _available)
    return old


def _onednn(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (M, K) @ weight (N, K)^T + bias in oneDNN. A transposed `weight` view is read in place;
    the operator makes `x` contiguous itself."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _OneDnnLinear(torch.autograd.Function):
    """y = x W^T + b with the backward's two products also in oneDNN:
    dL/dx = g W and dL/dW = g^T x, each written as a product with a transposed view."""

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:  # x (M, K)
        return _onednn(x, weight, bias)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, weight, bias = inputs
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None

    @staticmethod
    @once_differentiable  # the operator has no derivative of its own: second order would be lost
    def backward(ctx, grad: Tensor):  # grad (M, N)
        x, weight = ctx.saved_tensors
        grad_x = _onednn(grad, weight.t(), None) if ctx.needs_input_grad[0] else None  # (M, K)
        grad_w = None
        if ctx.needs_input_grad[1]:  # (N, K); oneDNN is 1.5-1.7x faster with the wider side last
            n_out, n_in = weight.shape
            if n_out <= n_in:
                grad_w = _onednn(grad.t(), x.t(), None)
            else:
                grad_w = _onednn(x.t(), grad.t(), None).t()  # (K, N) -> (N, K)
        grad_b = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


def _autocast_on_cpu() -> bool:
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled()


def _takes_onednn(x: Tensor, weight: Tensor, grad: bool) -> bool:
    return (
        _route_open(weight, grad)
        and x.device.type == "cpu"
        and x.dtype == weight.dtype
        and x.numel() > 0
        and (grad or x.numel() > MKL_ROWS * x.size(-1) or weight.numel() > MKL_WEIGHT_ENTRIES)
    )


def _route_open(weight: Tensor, grad: bool) -> bool:
    """Whether products of `weight` may take oneDNN, whatever their input: the route on for
    training (`grad`) or decoding, a float32 CPU weight, outside autocast and torch.compile."""
    return (
        (_enabled.training if grad else _enabled.decoding)
        and weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and not _autocast_on_cpu()
        and not torch.compiler.is_compiling()
    )


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """F.linear(x, weight, bias), x (..., K) -> (..., N), through oneDNN where that is faster,
    in bfloat16 inside `bf16.products` (training with `train.precision=bf16` on a CPU) and
    `bf16_decoding.bf16_products` (decoding with `decode.precision=bf16`), and in int8 inside
    `int8.int8_products` (decoding with `--int8`)."""
    grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (x, weight, bias)
    )
    if bf16.takes(x, weight, bias):
        flat = x.reshape(-1, x.size(-1))
        return bf16.linear(flat, weight, bias).view(*x.shape[:-1], weight.size(0))
    if not grad and int8.active():
        out = int8.maybe_int8(x.reshape(-1, x.size(-1)), weight, bias)
        if out is not None:
            return out.view(*x.shape[:-1], weight.size(0))
    if not grad and bf16_decoding.active():  # what int8 leaves, where both are on
        out = bf16_decoding.maybe_bf16(x.reshape(-1, x.size(-1)), weight, bias)
        if out is not None:
            return out.view(*x.shape[:-1], weight.size(0))
    if not _takes_onednn(x, weight, grad):
        return F.linear(x, weight, bias)
    flat = x.reshape(-1, x.size(-1))  # (M, K)
    if grad:
        out = _OneDnnLinear.apply(flat, weight, bias)
    else:  # decoding: no autograd node to build, and the weight may be prepacked
        out = _onednn(flat, _packed_or_plain(weight), bias)
    return out.view(*x.shape[:-1], weight.size(0))


def product_for_decoding(weight: Tensor, bias: Tensor | None) -> Callable[[Tensor], Tensor]:
    """`linear(x, weight, bias)` for inputs x (M, K) without gradients, its route chosen once for
    the weight as it is now: the same products bit for bit, without `linear`'s checks at each
    (`step_plan`: a step of `small` at batch 1 is 19 products, ~12 us of checks each against
    ~70 us of product). For as long as the weight, the route and the open contexts stay as
    they are: one search. Inside `int8_products` or `bf16_products` a product still chooses
    int8 or bfloat16 by its row count, as `linear` does, and float32's route where neither
    gains (inside `int8_products` on a CPU without VNNI, every product of a sentence at a time)."""
    float32 = _float32_product(weight, bias)
    lowered = [
        product
        for product in (
            int8.product_for_decoding(weight, bias),  # int8 first where both are on, as `linear`
            bf16_decoding.product_for_decoding(weight, bias),
        )
        if product is not None
    ]
    if not lowered:
        return float32

    def product(x: Tensor) -> Tensor:
        for lower in lowered:
            out = lower(x)
            if out is not None:
                return out
        return float32(x)

    return product


def _float32_product(weight: Tensor, bias: Tensor | None) -> Callable[[Tensor], Tensor]:
    if not _route_open(weight, grad=False):
        return partial(F.linear, weight=weight, bias=bias)
    packed = _packed_or_plain(weight)
    if weight.numel() > MKL_WEIGHT_ENTRIES:
        return partial(_onednn, weight=packed, bias=bias)

    def product(x: Tensor) -> Tensor:  # a small weight stays with MKL up to MKL_ROWS rows
        if x.size(0) > MKL_ROWS:
            return _onednn(x, packed, bias)
        return F.linear(x, weight, bias)

    return product


def _packed_or_plain(weight: Tensor) -> Tensor:
    # Inference tensors have no version counter to check staleness by: they are read unpacked.
    store = _packing.store
    if store is None or not _can_pack or weight.is_inference():
        return weight
    return copy_of(store, weight, _packed_copy)


def _packed_copy(weight: Tensor) -> Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACKED_FOR_ROWS)


def packed_for_inference(keep: PackedWeights | None = None) -> AbstractContextManager[None]:
    """Within: products without gradients read their weights prepacked for oneDNN.

    Decoding runs the same weights through thousands of small products, and oneDNN otherwise
    reorders each weight on every call: prepacked, beam search's products are bit for bit the
    same and 1.03-1.3x faster at 64-256 rows, up to 2.3x at 4 (batch 1; benchmarks/SPEED.md).
    A weight is packed on its first product, so only the weights products read are copied.
    The copies go into `keep` if given, a store that outlives the call (a server's translator
    decodes request after request with the same weights: packing them again for each made a
    one-sentence request 1.14-1.31x slower at `tiny`, measured when all its products took
    oneDNN); otherwise they are dropped when the outermost context exits. A nested context uses
    the outer one's store. Not for several threads decoding at once: the first to leave closes
    the others' store (they stay correct, only slower).
    """
    return _packing.open(keep)


class Linear(nn.Linear):
    """nn.Linear (same parameters, same checkpoint names) whose product is `linear` above."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)
