"""Decoding's matrix products in bfloat16 on a CPU with AVX-512's bfloat16 dot products
(`decode.precision=bf16`; `auto` takes it there, `chosen`).

Each weight is rounded once to bfloat16 and prepacked for oneDNN; each product rounds its input
rows to bfloat16, sums in float32 (the hardware's dot products do) and rounds its output to
bfloat16, which is raised to float32 before the float32 bias is added: training's products on
the CPU route of `models/bf16.py`, which a model trained on such a CPU has met at every update.
The softmaxes, layer norms, attention over the cache and the search's scores stay float32, and
so does `score` (forced decoding: log-probabilities a user reads as numbers).

On an AMD EPYC of Zen 4 (AVX-512 BF16, no AMX; 2 cores) oneDNN's bfloat16 products ran the
large products of `small`'s decoding 1.5-2.2x as fast as float32's, casts included (small ones
lose: `MIN_ROWS`), and beam search of the test set at batch 64 1.08-1.3x, BLEU 36.29 against
36.38 (benchmarks/SPEED.md, session 66). With AMX (Intel's Xeons from the 4th generation)
session 48's prototype, weights cast but not prepacked, was not a gain (0.72-1.14x): `auto`
leaves those CPUs in float32, where `decode.precision=bf16` still takes the route for a user
who measures otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
from torch import Tensor

from ..config import ConfigError
from .derived import CopyScope, WeightCopies

PACKED_FOR_ROWS = 64  # the row count oneDNN tunes a packed layout for, as `matmul`'s float32

# A bfloat16 call costs oneDNN ~35-40 us whatever its size (casts included), against ~9-20 us for
# a small float32 product through MKL, so only products that gain take the route: those of at
# least MIN_ROWS rows with a weight at least WIDE both ways, and any of at least
# MIN_MULTIPLY_ADDS (rows x weight entries). On the Zen 4 (session 66, 2 threads): the output
# projection over 8,000 pieces gained 1.5-2.2x from 64 rows; `small`'s 256-wide layers 1.1-1.5x at
# 256 rows and about level at 64; at 4 rows (a sentence at a time) every product was level
# (0.83-1.18x), so batch 1 keeps float32's exact outputs; `tiny`'s 128-wide layers lost at any
# row count (0.25-0.9x). The tests' toys are far below both bars: float32 on every CPU.
MIN_ROWS, WIDE = 64, 256
MIN_MULTIPLY_ADDS = 1 << 25

_avx512_bf16 = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()
_amx = getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
available = torch.backends.mkldnn.is_available() and hasattr(
    torch.ops.mkldnn, "_reorder_linear_weight"
)


def chosen(precision: str, device: torch.device) -> bool:
    """Whether decoding on `device` takes this route: `bf16` asked for (on a CPU that
    multiplies bfloat16 in hardware), or `auto` on a CPU with AVX-512 BF16 and no AMX."""
    if precision == "fp32":
        return False
    if device.type != "cpu":
        if precision == "bf16":
            raise ConfigError("decode.precision=bf16 is a CPU route: on a GPU, leave it at auto")
        return False
    if precision == "bf16" and not (available and (_avx512_bf16 or _amx)):
        raise ConfigError(
            "decode.precision=bf16 needs bfloat16 products in hardware (AVX-512 BF16: AMD Zen 4 "
            "or later, Intel Cooper Lake; or AMX) and a PyTorch with oneDNN: leave it at auto"
        )
    return precision == "bf16" or (precision == "auto" and available and _avx512_bf16 and not _amx)


# Each weight's bfloat16 copy, packed for oneDNN, made on its first product
# (`derived.copy_of`), in the open context's store.
Bf16Weights = WeightCopies[Tensor]
_copies: CopyScope[Tensor] = CopyScope()


def bf16_products(keep: Bf16Weights | None = None) -> AbstractContextManager[None]:
    """Within: float32 CPU products without gradients run in bfloat16 (`maybe_bf16`).

    A weight's copy is made on its first product and kept in `keep` if given (a translator
    keeps one for its lifetime), otherwise until the outermost context exits (`CopyScope`)."""
    return _copies.open(keep)


def active() -> bool:
    return _copies.store is not None


def maybe_bf16(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor | None:
    """x (M, K) @ weight (N, K)^T + bias with the product in bfloat16, float32 in and out; or
    None where it stays float32: no context open, a product too small to gain, or not float32
    on the CPU."""
    product = product_for_decoding(weight, bias)
    return None if product is None or x.device.type != "cpu" else product(x)


def product_for_decoding(
    weight: Tensor, bias: Tensor | None
) -> Callable[[Tensor], Tensor | None] | None:
    """The weight's product for inputs x (M, K), its checks on the weight made once: `maybe_bf16`
    makes one at each product, `matmul.product_for_decoding` one a search (`step_plan`). None
    where no product of this weight takes the route (no context open, a weight not float32 on
    the CPU); what it returns chooses by the row count and hands back None for a product that
    stays float32 (too few rows, or an input not float32, as under autocast)."""
    return _copies.product(
        weight,
        lambda rows: _worth_it(rows, weight),
        _packed_copy,
        lambda x, packed: _product(x, packed, bias),
    )


def _product(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    product = torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), packed, None, "none", [], "")
    return product.float() if bias is None else product.float().add_(bias)


def _worth_it(rows: int, weight: Tensor) -> bool:
    wide = rows >= MIN_ROWS and min(weight.shape) >= WIDE
    return wide or rows * weight.numel() >= MIN_MULTIPLY_ADDS


def _packed_copy(weight: Tensor) -> Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(
        weight.detach().to(torch.bfloat16), PACKED_FOR_ROWS
    )
