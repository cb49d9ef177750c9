"""int8 products for CPU decoding (`translate --int8`), through oneDNN's quantized linear.

Each weight W (N, K) is rounded once to int8 with one scale per output unit, W ~ s_W q_W (s_W =
max |W_n| / 127). Each product rounds its input rows x (M, K) to uint8 with one scale and zero
point of their own, x ~ s_x (q_x - z_x), from their range at that moment (dynamic quantization:
nothing to calibrate). oneDNN sums (q_x - z_x) q_W^T in int32 (AMX or VNNI instructions where the
CPU has them) and hands back y = s_x s_W (that sum) + b in float32.

This is the route PyTorch maintains for x86 int8 (`onednn::qlinear_pointwise`, what its compiler
lowers quantized linears to); the older `torch.ao.quantization.quantize_dynamic` and its quantized
tensors are deprecated (pytorch/pytorch#184982). Unlike that route it also takes the tied output
projection, the largest product of a small model's decoding step.

A quantized call costs PyTorch's wrapper of oneDNN ~50 us of its own whatever its size (its
kernel runs 4-16 us at a step of beam search), more than a small float32 product takes in all
through MKL (~18 us), so only products worth it go int8: those of at least MIN_MULTIPLY_ADDS
multiply-adds and, on CPUs with VNNI, those whose weight is so large that reading it is the cost
(the output projection over the vocabulary, whatever the rows). There, decoding a batch of 64
(256 beam rows) quantizes nearly every product; a sentence at a time (4 rows), the output
projection and little else (benchmarks/SPEED.md, "int8 through oneDNN", session 18). Without
VNNI the bar is higher and a sentence at a time stays float32 (session 26).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor

from .derived import CopyScope, WeightCopies

_vnni = getattr(torch.cpu, "_is_vnni_supported", lambda: False)()

# Which products gain depends on the CPU. With VNNI (a Xeon with AMX, session 18): those of at
# least 2^24 multiply-adds (M x K x N), and any whose weight (N x K) is so large that reading it,
# not its products, takes the time. Without VNNI (AVX2 only: two instructions per u8 x s8 pair,
# and 7-bit rows) int8 gains less while rounding the rows costs the same; on an AMD EPYC of that
# kind (session 26, benchmarks/SPEED.md), int8 against float32 packed: a 256 x 256 weight never
# gained (0.40x at 4 rows to 0.86x at 512), 768 x 256 and 1,024 x 256 gained from 256 rows
# (1.2-1.4x), the 10,000-piece output projection from 64 rows (1.4-1.5x) and took 2x as long at
# 4 (a sentence at a time). Hence 3 x 2^24 there, and no exception for large weights.
MIN_MULTIPLY_ADDS = 1 << 24 if _vnni else 3 << 24
MIN_WEIGHT: int | None = 1 << 20 if _vnni else None

# The largest uint8 of a row. Without VNNI, x86 multiplies u8 x s8 pairs into saturating int16
# sums (vpmaddubsw): at 8 bits a product of 64 lost 19% of its largest output on an AVX2-only
# host, at 7 bits 1.1%. fbgemm's `reduce_range` is the same remedy.
ROW_MAX = 255 if _vnni else 127

available = torch.backends.mkldnn.is_available() and hasattr(torch.ops.onednn, "qlinear_prepack")


@dataclass(frozen=True)
class Int8Weight:
    """A weight (N, K) as oneDNN's prepacked int8 and the scale of each output unit."""

    packed: Tensor
    scales: Tensor  # (N,) float32
    zero_points: Tensor  # (N,) int64 zeros: the weights are symmetric

    @classmethod
    def of(cls, weight: Tensor) -> Int8Weight:
        w = weight.detach().float()
        scales = w.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny) / 127
        q = torch.round(w / scales[:, None]).to(torch.int8)
        zeros = torch.zeros(w.size(0), dtype=torch.int64)
        return cls(torch.ops.onednn.qlinear_prepack(q, None), scales, zeros)


# Each weight's Int8Weight, made on its first product (`derived.copy_of`), in the open
# context's store.
Int8Weights = WeightCopies[Int8Weight]
_copies: CopyScope[Int8Weight] = CopyScope()


def int8_products(keep: Int8Weights | None = None) -> AbstractContextManager[None]:
    """Within: large float32 CPU products without gradients run in int8 (`maybe_int8`).

    A weight is quantized on its first product and kept in `keep` if given (a translator keeps
    one for its lifetime), otherwise until the outermost context exits (`CopyScope`). Without
    oneDNN's int8 it opens nothing."""
    return _copies.open(keep) if available else nullcontext()


def active() -> bool:
    return _copies.store is not None


def maybe_int8(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor | None:
    """x (M, K) @ weight (N, K)^T + bias in int8, or None where it stays float32: no context
    open, not float32 on the CPU, or a product too small to gain (see the module's doc)."""
    product = product_for_decoding(weight, bias)
    return None if product is None or x.device.type != "cpu" else product(x)


def product_for_decoding(
    weight: Tensor, bias: Tensor | None
) -> Callable[[Tensor], Tensor | None] | None:
    """The weight's product for inputs x (M, K), its checks on the weight made once: `maybe_int8`
    makes one at each product, `matmul.product_for_decoding` one a search (`step_plan`). None
    where no product of this weight takes int8 (no context open, a weight not float32 on the CPU);
    what it returns chooses by the row count and hands back None for a product that stays
    float32 (too few rows, or an input not float32, as under autocast)."""
    size = weight.numel()
    return _copies.product(
        weight, lambda rows: _worth_it(rows, size), Int8Weight.of, lambda x, w: _product(x, w, bias)
    )


def _product(x: Tensor, w: Int8Weight, bias: Tensor | None) -> Tensor:
    q_x, scale, zero_point = _quantized_rows(x)
    return torch.ops.onednn.qlinear_pointwise(
        q_x, scale, zero_point, w.packed, w.scales, w.zero_points, bias,
        1.0, 0, torch.float32, "none", [], "",
    )  # fmt: skip


def _worth_it(rows: int, weight_size: int) -> bool:
    large_weight = MIN_WEIGHT is not None and weight_size >= MIN_WEIGHT
    return rows * weight_size >= MIN_MULTIPLY_ADDS or large_weight


def _quantized_rows(x: Tensor) -> tuple[Tensor, float, int]:
    """x ~ scale (q - zero_point), q in 0..ROW_MAX over x's range widened to hold 0 (exact
    zeros stay exact: padding rows, ReLU's outputs)."""
    low, high = (v.item() for v in torch.aminmax(x))
    low, high = min(low, 0.0), max(high, 0.0)
    scale = (high - low) / ROW_MAX or 1.0
    zero_point = min(max(round(-low / scale), 0), ROW_MAX)
    q = torch.mul(x, 1 / scale).round_().add_(zero_point).clamp_(0, ROW_MAX).to(torch.uint8)
    return q, scale, zero_point
