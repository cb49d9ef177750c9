"""Dropout (s5.4, Srivastava et al. 2014) whose mask is cheap to draw and apply on the CPU.

Each element is zeroed with probability p and the survivors are scaled by 1 / (1 - p), as
`nn.Dropout`. On the CPU, PyTorch draws the mask with `bernoulli_`, one float from one serial
generator call per element: at `tiny` it was 14% of an update's time on 2 threads, more than
the attention kernel (benchmarks/SPEED.md, session 10). Here each 64-bit draw is cut into four
16-bit integers, and an element is dropped where its integer falls below p's share of the 65,536
values: p is rounded to a multiple of 1/65,536 (0.1 becomes 0.100006), an error far below
anything training can notice, and the survivors are scaled by the rounded rate, so the
expectation is exact. The draws come from numpy's SFC64 generator, seeded at each call from
torch's (so `torch.manual_seed` and the checkpointed RNG state govern them): 2-3x faster than
torch's own 64-bit draws. The mask is one byte per element, 1 where kept, and multiplies:
`masked_fill` and `where` with a bool mask cost 3-4x a product on the CPU. In the residual
connection the sum is in the same pass, `addcmul(x, sublayer, keep, value=scale)`: a site of
`small`, forward and backward, 1.8 ms against 5.0, its update 1.08x (SPEED.md, session 52).

A speed-only module, as `matmul.py`: other devices, and a rate that rounds to 1, take PyTorch's
own dropout, and so does code that torch.compile traces (training/compiled.py).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEVELS = 1 << 16  # the 16-bit integers a draw is cut into take 65,536 values


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """`F.dropout(x, p, training)`, with the CPU's mask drawn 16 bits per element."""
    return _dropped(x, p, training, residual=None)


def _dropped(x: Tensor, p: float, training: bool, residual: Tensor | None) -> Tensor:
    """Dropout of x, added to `residual` where one is given."""
    levels_dropped = round(_checked(p) * LEVELS)
    dropping = training and levels_dropped > 0
    if dropping and _cheap_mask_applies(x, levels_dropped):
        keep = keep_mask(x.shape, levels_dropped)
        scale = LEVELS / (LEVELS - levels_dropped)
        # autograd keeps `keep` for the backward, and a second derivative works as for any op
        if residual is None:
            return torch.mul(x, keep).mul_(scale)
        return torch.addcmul(residual, x, keep, value=scale)
    if dropping:
        x = F.dropout(x, p, training=True)
    return x if residual is None else residual + x


def _cheap_mask_applies(x: Tensor, levels_dropped: int) -> bool:
    """Whether x takes this module's mask: a float on the CPU, a rate short of 1, not traced."""
    return (
        x.device.type == "cpu"
        and levels_dropped < LEVELS
        and x.is_floating_point()
        and not torch.compiler.is_compiling()  # torch.compile traces no numpy generator
    )


def keep_mask(shape: torch.Size, levels_dropped: int) -> Tensor:
    """uint8, 1 where an element is kept: each dropped with probability levels_dropped / 65,536."""
    numel = shape.numel()
    seed = int(torch.empty((), dtype=torch.int64).random_())  # from torch's generator
    draws = np.random.SFC64(seed).random_raw((numel + 3) // 4)
    integers = draws.view(np.int16)[:numel]  # uniform on [-32768, 32767]
    # numpy's comparison of int16 with a number was 3x torch's (SPEED.md, session 52)
    kept = np.greater_equal(integers, levels_dropped - LEVELS // 2)
    return torch.from_numpy(kept).view(torch.uint8).view(shape)


def _checked(p: float) -> float:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    return p


class Dropout(nn.Module):
    """`nn.Dropout` with the CPU's cheaper mask (see the module's docstring)."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = _checked(p)  # a bad rate fails when the model is built, not at its first step

    def forward(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
        """Dropout of x; with `residual`, residual + dropout(x) in one pass on the CPU (a
        module call still, so that hooks on it see the residual connections' dropout too)."""
        return _dropped(x, self.p, self.training, residual)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class LateDropout:
    """Late dropout (Liu et al. 2023): none for a run's first updates, then the model's rates.

    Dropout slows a young model that has yet to fit its data, and keeps an older one from
    overfitting a small corpus; a short run on a fast host is both in turn. The sites are found
    once: this module's `Dropout` and `nn.Dropout` (their `p`), and the float `dropout` rates of
    attention's weights and of the recurrent stacks between layers; those at 0 have nothing to
    begin, and a model without dropout has no update where it begins. The rates follow the
    update's number alone, so a resumed run switches where an unbroken one does.
    """

    def __init__(self, model: nn.Module, updates_without: int) -> None:
        self.updates_without = updates_without
        sites = [(m, name, getattr(m, name)) for m in model.modules() for name in _rates(m)]
        self.sites = [(module, name, rate) for module, name, rate in sites if rate > 0]

    def before(self, update: int) -> bool:
        """Set the rates for `update` (a run's first is 1): True where dropout begins with it."""
        if not self.updates_without or not self.sites:
            return False
        on = update > self.updates_without
        for module, name, rate in self.sites:  # a few dozen attributes: cheap every update
            setattr(module, name, rate if on else 0.0)
        return update == self.updates_without + 1


def _rates(module: nn.Module) -> tuple[str, ...]:
    """The names of a module's own dropout rates."""
    if isinstance(module, (Dropout, nn.Dropout)):
        return ("p",)
    return ("dropout",) if isinstance(getattr(module, "dropout", None), float) else ()
