"""Training's matrix products in bfloat16 on a CPU that multiplies bfloat16 in hardware
(`train.precision=bf16`; `auto` takes it there, `supported`).

Intel's Xeons from the 4th generation (Sapphire Rapids) on multiply bfloat16 matrices in AMX
tiles, 3-10x faster than float32 at training's shapes on 2 cores (oneDNN, called by PyTorch for
bfloat16 products; benchmarks/SPEED.md, session 46); AMD's EPYCs from Zen 4 on (and Intel's
Cooper Lake) with AVX-512's bfloat16 dot products (an update of `small` 1.51x float32's on a
Zen 4, session 64). Only training's products take that route, forward and backward: the linear
layers' (`linear`), the FFN's two (`feed_forward`) and the loss's with the output weight
(`Projection`, that weight cast once an update for all the loss's chunks). The weights, the
optimiser, layer norms, softmaxes, residual sums and the loss's sums stay float32, as under
autocast on a GPU. Each product's inputs are rounded to bfloat16 and its sums kept in float32 by
the hardware; the output is rounded to bfloat16 on the way out and raised back to float32,
except between the FFN's two products, whose hidden units stay bfloat16.

oneDNN compiles a product for each shape it meets and keeps a few in a cache
(`matmul.CACHED_PRODUCTS`). Token-bucketed batches bring a new row count at nearly every update,
and a bfloat16 product compiled afresh costs more than it saves (1,000 x 256 x 256 took 3 ms a
call, against 0.24 ms from the cache). So the rows are padded with zeros to a multiple of
`PAD_ROWS`, which makes training's row counts a handful, and the cache is raised to
`CACHED_PRODUCTS` entries, enough for an update's products, by `prepare` (the Trainer's, once).
Zero rows add nothing to the weight's gradient, and their outputs are dropped. A cached product
holds memory that grows with its shapes, while a miss costs a few milliseconds whatever the
shapes: from `WIDE_D_MODEL` on, the products are long enough that the float32 route's 8 entries
lose nothing, so the caches stay at 8 there (`cached_products`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..config import ConfigError, TransformerConfig

PAD_ROWS = 128
CACHED_PRODUCTS = 64
# At `base` (4,096-token batches) 64 entries held ~1 GB more than 8, and 8 were as fast; at
# `small` 64 were worth 1.10-1.17x an update for ~70 MiB (benchmarks/SPEED.md, sessions 47-48).
WIDE_D_MODEL = 512
WIDE_CACHED_PRODUCTS = 8
# `train.precision=auto` takes this route for a Transformer at least this wide, on a CPU that
# `supported`: with AMX `small` (256) and up gained 1.3-1.9x an update at the same quality
# (benchmarks/SPEED.md, sessions 46-47); `tiny` (128, the demo's) was level until the FFN's hidden
# units stayed bfloat16, then 1.22x an update and 1.32x the demo's updates, level update for
# update, at a peak of 1,057-1,135 MiB (session 49). With AVX-512 BF16 (an AMD EPYC of Zen 4,
# session 64) `tiny` 1.36-1.68x, `small` 1.51x. The tests' narrower toys stay float32.
AUTO_MIN_D_MODEL = 128
CACHE_SETTINGS = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
# Those the user set, left as they are; read on import, before `matmul` (which imports this
# module first) sets its own defaults.
USER_SET = frozenset(name for name in CACHE_SETTINGS if name in os.environ)

# The CPU features with which oneDNN multiplies bfloat16 in hardware: AMX tiles (Intel Xeons from
# the 4th generation) or AVX-512's bfloat16 dot products (AMD from Zen 4, Intel's Cooper Lake).
# Without either it emulates them, slower than float32.
NATIVE_BF16_PROBES = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")

_active = False


def supported() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (NATIVE_BF16_PROBES)."""
    return any(bool(getattr(torch.cpu, probe, lambda: False)()) for probe in NATIVE_BF16_PROBES)


def chosen(precision: str, device: torch.device, model: object) -> bool:
    """Whether training `model` (its config) on `device` takes this route: asked for with
    `bf16`, or `auto` for a Transformer of AUTO_MIN_D_MODEL or more on a CPU `supported`."""
    if device.type != "cpu" or precision == "fp32":
        return False
    if precision == "bf16":
        return True
    wide = isinstance(model, TransformerConfig) and model.d_model >= AUTO_MIN_D_MODEL
    return wide and supported()


def cached_products(model: object) -> int:
    """The product caches' entries for training `model` (its config) on this route."""
    wide = getattr(model, "d_model", 0) >= WIDE_D_MODEL
    return WIDE_CACHED_PRODUCTS if wide else CACHED_PRODUCTS


def prepare(model: object) -> None:
    """Before training `model` (its config) takes this route: refuse a CPU that would emulate
    bfloat16 products, and size the product caches (`cached_products`).

    oneDNN and ideep read the cache settings at the process's first oneDNN product; where one
    has run before (float32 products take oneDNN on some CPUs), the smaller cache stays: slower,
    not wrong."""
    if not supported():
        raise ConfigError(
            "train.precision=bf16 on a CPU needs bfloat16 products in hardware: AMX (Intel Xeon of"
            " the 4th generation or later) or AVX-512 BF16 (AMD Zen 4 or later, Intel Cooper"
            " Lake); this CPU would emulate them, slower than float32: leave it at auto"
        )
    size_product_caches(cached_products(model))


def size_product_caches(entries: int) -> None:
    """oneDNN's and ideep's product caches at `entries` each, where the user set neither; read
    at the process's first oneDNN product, so set before it."""
    for name in CACHE_SETTINGS:
        if name not in USER_SET:
            os.environ[name] = str(entries)


def active() -> bool:
    return _active


@contextmanager
def products() -> Iterator[None]:
    """Inside: `matmul.linear`'s float32 CPU products that take gradients run in bfloat16."""
    global _active
    before, _active = _active, True
    try:
        yield
    finally:
        _active = before


def takes(x: Tensor, *parameters: Tensor | None) -> bool:
    """Whether products of `x` with `parameters` take this route: inside `products`, float32 on
    the CPU, and a gradient wanted (decoding and validation stay float32)."""
    if not _active or x.device.type != "cpu" or x.dtype != torch.float32:
        return False  # the common case first: off the route, nothing more is looked at
    return torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (x, *parameters)
    )


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (M, K) @ weight (N, K)^T + bias, the product in bfloat16, float32 in and out."""
    return _Bf16Linear.apply(x, weight, bias)


def _padded(rows: Tensor) -> Tensor:
    """`rows` in bfloat16 with zero rows added up to a multiple of PAD_ROWS: cast into the padded
    tensor in one pass, only the added rows zeroed (`F.pad` of the cast was two passes over the
    rows and a third to zero them)."""
    count = rows.size(0)
    extra = -count % PAD_ROWS
    if extra == 0:
        return rows.to(torch.bfloat16)
    low = rows.new_empty((count + extra, rows.size(1)), dtype=torch.bfloat16)
    low[:count].copy_(rows)
    low[count:].zero_()
    return low


def _output(x_low: Tensor, weight_low: Tensor, rows: int, bias: Tensor | None = None) -> Tensor:
    """x W^T (+ b) in bfloat16, float32 out, of `x_low` padded (`_padded`) from `rows` rows. The
    product is raised to float32, then the float32 bias added in place: two passes, but each of
    one dtype. PyTorch's add of a bfloat16 and a float32 tensor (one pass, promoting as it goes)
    took 1.33-1.6x as long at training's shapes (0.144 against 0.105 ms at 4,096 x 128 on 2
    threads; SPEED.md, session 53); the sums are the same to the bit."""
    product = torch.mm(x_low, weight_low.t())[:rows].float()
    return product if bias is None else product.add_(bias)


def _gradients(grad: Tensor, x_low: Tensor, weight_low: Tensor, wanted: tuple) -> tuple:
    """(dL/dx, dL/dW) of y = x W^T given g = dL/dy (float32), each where `wanted`: g W and g^T x
    in bfloat16, float32 out, g's rows padded as `x_low`'s (its zero rows add nothing to g^T x)."""
    return _padded_gradients(_padded(grad), x_low, weight_low, wanted, grad.size(0))


def _padded_gradients(
    grad_low: Tensor, x_low: Tensor, weight_low: Tensor, wanted: tuple, rows: int | None
) -> tuple:
    """`_gradients` of g already bfloat16 and padded: dL/dx raised to float32 on its first
    `rows` rows, or left bfloat16 and padded where `rows` is None (for a next product)."""
    grad_x = None
    if wanted[0]:
        grad_x = torch.mm(grad_low, weight_low)
        grad_x = grad_x if rows is None else grad_x[:rows].float()
    grad_w = torch.mm(grad_low.t(), x_low).float() if wanted[1] else None
    return grad_x, grad_w


class _Bf16Linear(torch.autograd.Function):
    """y = x W^T + b; backward dL/dx = g W and dL/dW = g^T x, the three products in bfloat16."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        x_low, weight_low = _padded(x), weight.to(torch.bfloat16)
        ctx.save_for_backward(x_low, weight_low)
        ctx.has_bias = bias is not None
        return _output(x_low, weight_low, x.size(0), bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        x_low, weight_low = ctx.saved_tensors
        grad_x, grad_w = _gradients(grad, x_low, weight_low, ctx.needs_input_grad[:2])
        grad_b = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


def feed_forward(x: Tensor, first: nn.Linear, second: nn.Linear, dropout: nn.Module) -> Tensor:
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (eq. 2) with its hidden units kept in bfloat16 from the
    first product to the second, forward and backward.

    `linear` raises each product to float32 and the next product rounds it back: around the
    FFN's hidden layer, 4 x d_model wide, those were four passes of the update's widest
    activations (two forward, two backward) that change nothing, since the rounding to bfloat16
    happens anyway before the second product. Here the first product's output (b1, rounded to
    bfloat16, added before its one rounding), the ReLU and the dropout (its scaling rounded as
    the second product would round it) stay bfloat16, with the rows still padded for the second
    product; the padding rows' gradient is zero, so they add nothing to W1's or b1's.
    """
    flat = x.reshape(-1, x.size(-1))
    hidden = _LowOutput.apply(flat, first.weight, first.bias)  # (padded rows, d_ff)
    hidden = dropout(hidden.relu_())
    out = _LowInput.apply(hidden, second.weight, second.bias, flat.size(0))
    return out.view(*x.shape[:-1], second.weight.size(0))


class _LowOutput(torch.autograd.Function):
    """h = x W^T + b for `feed_forward`: float32 x in, bfloat16 h out with x's padded rows."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        x_low, weight_low = _padded(x), weight.to(torch.bfloat16)
        ctx.save_for_backward(x_low, weight_low)
        ctx.rows, ctx.has_bias = x.size(0), bias is not None
        if bias is None:
            return torch.mm(x_low, weight_low.t())
        return torch.addmm(bias.to(torch.bfloat16), x_low, weight_low.t())

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):  # bfloat16, zero on the padding rows
        x_low, weight_low = ctx.saved_tensors
        wanted = ctx.needs_input_grad
        grad_x, grad_w = _padded_gradients(grad, x_low, weight_low, wanted[:2], ctx.rows)
        grad_b = grad.sum(0, dtype=torch.float32) if ctx.has_bias and wanted[2] else None
        return grad_x, grad_w, grad_b


class _LowInput(torch.autograd.Function):
    """y = h W^T + b for `feed_forward`: bfloat16 h in (padded), float32 y out (`rows` rows)."""

    @staticmethod
    def forward(ctx, h_low: Tensor, weight: Tensor, bias: Tensor | None, rows: int) -> Tensor:
        weight_low = weight.to(torch.bfloat16)
        ctx.save_for_backward(h_low, weight_low)
        ctx.has_bias = bias is not None
        return _output(h_low, weight_low, rows, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        h_low, weight_low = ctx.saved_tensors
        wanted = ctx.needs_input_grad
        # dL/dh stays bfloat16 and padded, for the ReLU, the dropout and the first product
        grad_h, grad_w = _padded_gradients(_padded(grad), h_low, weight_low, wanted[:2], None)
        grad_b = grad.sum(0) if ctx.has_bias and wanted[2] else None
        return grad_h, grad_w, grad_b, None


class Projection:
    """The three products of the loss with the output weight W (V, d), chunk by chunk
    (`training.loss`): the logits h W^T and the loss's gradients g W (for h) and g^T h (for W),
    in bfloat16 as `linear`'s. W is cast once for every chunk of an update; a chunk's rows are
    padded as `linear`'s, so the last chunk's odd row count does not compile new products each
    update, and cast once for its logits and its gradients."""

    def __init__(self, weight: Tensor) -> None:
        self.weight_low = weight.to(torch.bfloat16)
        self._chunk: tuple[Tensor, Tensor] | None = None  # the last chunk, and its rows cast

    def logits(self, hidden: Tensor) -> Tensor:
        self._chunk = hidden, _padded(hidden)
        return _output(self._chunk[1], self.weight_low, hidden.size(0))

    def gradients(self, grad: Tensor, hidden: Tensor, wanted: tuple) -> tuple:
        """(dL/dh, dL/dW) of a chunk whose logits' gradient is `grad`, each where `wanted`."""
        same = self._chunk is not None and self._chunk[0] is hidden
        hidden_low = self._chunk[1] if same else _padded(hidden)
        return _gradients(grad, hidden_low, self.weight_low, wanted)
