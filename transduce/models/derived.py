"""Copies of weights made for decoding (prepacked for oneDNN, rounded to int8), kept from one
product to the next by the weight's identity and made again when the weight changes in place."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from torch import Tensor

T = TypeVar("T")

# id(weight) -> (the weight, its version when the copy was made, the copy); holding the weight
# keeps its id from being reused.
WeightCopies = dict[int, tuple[Tensor, int, T]]


def copy_of(store: WeightCopies, weight: Tensor, make: Callable[[Tensor], T]) -> T:
    """`make(weight)`, made once and kept in `store` while the weight is unchanged.

    A weight changed in place since (an optimizer step between two validations) is copied
    afresh; changes made through `.data` bypass the version counter: none are made here.
    Inference tensors have no version counter, and cannot be changed outside inference mode.
    """
    version = -1 if weight.is_inference() else weight._version
    entry = store.get(id(weight))
    if entry is None or entry[1] != version:
        entry = store[id(weight)] = (weight, version, make(weight))
    return entry[2]
