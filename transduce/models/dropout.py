"""Dropout (s5.4, Srivastava et al. 2014) whose mask is cheap to draw on the CPU.

Each element is zeroed with probability p and the survivors are scaled by 1 / (1 - p), as
`nn.Dropout`. On the CPU, PyTorch draws the mask with `bernoulli_`, one float from one serial
generator call per element: at `tiny` it was 14% of an update's time on 2 threads, more than
the attention kernel (benchmarks/SPEED.md, session 10). Here each 64-bit draw of the same
generator (`torch.manual_seed` and the checkpointed RNG state govern it) is cut into four
16-bit integers, and an element is dropped where its integer falls below p's share of the
65,536 values: p is rounded to a multiple of 1/65,536 (0.1 becomes 0.100006), an error far
below anything training can notice, and the survivors are scaled by the rounded rate, so the
expectation is exact. The backward keeps the mask, one byte per element (`nn.Dropout` keeps
four). A speed-only module, as `matmul.py`: other devices, and a rate that rounds to 1, take
PyTorch's own dropout, and so does code that torch.compile traces (training/compiled.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEVELS = 1 << 16  # the 16-bit integers a draw is cut into take 65,536 values


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """`F.dropout(x, p, training)`, with the CPU's mask drawn 16 bits per element."""
    levels_dropped = round(_checked(p) * LEVELS)
    if not training or levels_dropped == 0:
        return x
    if (
        x.device.type != "cpu"
        or levels_dropped == LEVELS
        or not x.is_floating_point()
        or torch.compiler.is_compiling()  # torch.compile traces no in-place random_
    ):
        return F.dropout(x, p, training=True)
    with torch.no_grad():
        dropped = drop_mask(x.shape, levels_dropped)
    # autograd keeps `dropped` for the backward, and a second derivative works as for any op
    return x.masked_fill(dropped, 0.0) * (LEVELS / (LEVELS - levels_dropped))


def drop_mask(shape: torch.Size, levels_dropped: int) -> Tensor:
    """True where an element is dropped: each with probability levels_dropped / 65,536."""
    numel = shape.numel()
    # random_ of an int64 draws from [0, 2^63) unless told the range: its top bit would be 0
    # and every fourth integer non-negative, so the full range is asked for.
    draws = torch.empty((numel + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)
    integers = draws.view(torch.int16)[:numel].view(shape)  # uniform on [-32768, 32767]
    return integers < levels_dropped - LEVELS // 2


def _checked(p: float) -> float:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    return p


class Dropout(nn.Module):
    """`nn.Dropout` with the CPU's cheaper mask (see the module's docstring)."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = _checked(p)  # a bad rate fails when the model is built, not at its first step

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

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
