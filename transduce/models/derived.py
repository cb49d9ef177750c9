"""Copies of weights made for decoding (prepacked for oneDNN, rounded to int8), kept from one
product to the next by the weight's identity and made again when the weight changes in place."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

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
