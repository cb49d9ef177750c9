"""Copies of weights made for decoding (models/derived.py): made once per weight, and made again
whenever the weight has changed since, whatever changed it."""

import gc
import weakref

import torch
from torch import nn

from transduce.models.derived import copy_of


class _Maker:
    """A `make` that counts its calls and tags each copy with its call's number."""

    def __init__(self):
        self.calls = 0

    def __call__(self, weight: torch.Tensor) -> tuple[int, torch.Tensor]:
        self.calls += 1
        return self.calls, weight.detach().clone()


def test_a_weight_unchanged_is_copied_once_and_the_copy_kept():
    store, make, weight = {}, _Maker(), torch.randn(3, 4)
    first = copy_of(store, weight, make)
    assert copy_of(store, weight, make) is first and make.calls == 1
    other = torch.randn(3, 4)  # another weight has a copy of its own
    assert copy_of(store, other, make)[0] == 2 and copy_of(store, weight, make) is first


def test_a_weight_changed_in_place_is_copied_afresh():
    """An optimizer's step changes the data in place: a new version at the same address."""
    store, make, layer = {}, _Maker(), nn.Linear(4, 3)
    copy_of(store, layer.weight, make)
    with torch.no_grad():
        layer.weight.mul_(2.0)
    number, copy = copy_of(store, layer.weight, make)
    assert number == 2 and torch.equal(copy, layer.weight) and len(store) == 1


def test_a_weight_moved_to_new_data_is_copied_afresh():
    """A model's `.double()` or `.to()` gives each parameter new data under the same tensor
    object, at the version it had."""
    store, make, layer = {}, _Maker(), nn.Linear(4, 3)
    weight = layer.weight
    copy_of(store, weight, make)
    layer.double()
    assert layer.weight is weight
    number, copy = copy_of(store, weight, make)
    assert number == 2 and copy.dtype == torch.float64 and len(store) == 1


def test_an_inference_tensor_is_copied_once_though_it_has_no_version():
    """Made under inference mode it has no version counter (reading one raises); it cannot be
    changed outside inference mode, so its address alone tells it apart."""
    with torch.inference_mode():
        weight = torch.randn(3, 4)
    store, make = {}, _Maker()
    assert copy_of(store, weight, make) is copy_of(store, weight, make) and make.calls == 1


def test_the_store_keeps_each_weight_alive_so_its_id_is_never_reused():
    """Were a copied weight freed, a new tensor could take its id and, at the same address and
    version, be handed the old weight's copy."""
    store, make, weight = {}, _Maker(), torch.randn(3, 4)
    copy_of(store, weight, make)
    alive = weakref.ref(weight)
    del weight
    gc.collect()
    assert alive() is not None and alive() is store[id(alive())][0]
