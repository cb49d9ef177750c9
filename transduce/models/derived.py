"""Copies of weights made for decoding (prepacked for oneDNN, rounded to int8 or bfloat16), kept
from one product to the next by the weight's identity and made again when the weight changes in
place."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

import torch
from torch import Tensor

T = TypeVar("T")

# id(weight) -> (the weight, its `state_of` when the copy was made, the copy); holding the weight
# keeps its id from being reused.
WeightCopies = dict[int, tuple[Tensor, tuple[int, int], T]]


def copy_of(store: WeightCopies, weight: Tensor, make: Callable[[Tensor], T]) -> T:
    """`make(weight)`, made once and kept in `store` while the weight is unchanged.

    A weight changed in place since (an optimizer step between two validations) is copied
    afresh; changes made through `.data` bypass the version counter: none are made here.
    Inference tensors have no version counter, and cannot be changed outside inference mode.
    """
    state = state_of(weight)
    entry = store.get(id(weight))
    if entry is None or entry[1] != state:
        entry = store[id(weight)] = (weight, state, make(weight))
    return entry[2]


def state_of(weight: Tensor) -> tuple[int, int]:
    """Where a weight's data is and how often it was changed in place: `.to()` and `.double()`
    move the data, an optimizer's step changes the version (inference tensors have none)."""
    return weight.data_ptr(), -1 if weight.is_inference() else weight._version


class CopyScope(Generic[T]):
    """One kind of copies (packed, quantized, rounded) while a context of it is open: `store` is the
    outermost open context's, None outside one. A nested context uses the outer one's store.
    Not for several threads decoding at once: the first to leave closes the others' store."""

    def __init__(self) -> None:
        self.store: WeightCopies[T] | None = None

    def store_for(self, weight: Tensor) -> WeightCopies[T] | None:
        """The open store, where products of `weight` may take this kind of copy at all: None
        outside a context, for a weight not float32 on the CPU, and inside torch.compile."""
        if (
            self.store is None
            or weight.dtype != torch.float32
            or weight.device.type != "cpu"
            or torch.compiler.is_compiling()
        ):
            return None
        return self.store

    def product(
        self,
        weight: Tensor,
        worth_it: Callable[[int], bool],
        make: Callable[[Tensor], T],
        multiply: Callable[[Tensor, T], Tensor],
    ) -> Callable[[Tensor], Tensor | None] | None:
        """`weight`'s product through its copy, `multiply(x, copy)` for inputs x (M, K), the
        checks on the weight made once (`store_for`: None where no product of it takes the
        copy). What it returns hands back None for a product that stays float32: an input not
        float32 (as under autocast), or a row count `worth_it` refuses."""
        store = self.store_for(weight)
        if store is None:
            return None

        def product(x: Tensor) -> Tensor | None:
            if x.dtype != torch.float32 or not worth_it(x.size(0)):
                return None
            return multiply(x, copy_of(store, weight, make))

        return product

    @contextmanager
    def open(self, keep: WeightCopies[T] | None = None) -> Iterator[None]:
        """Within: `store` is `keep` if given (a store that outlives the context, as a
        translator's), else a new one dropped when the outermost context exits."""
        if self.store is not None:
            yield
            return
        self.store = keep if keep is not None else {}
        try:
            yield
        finally:
            self.store = None
