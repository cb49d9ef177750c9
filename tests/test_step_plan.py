"""The written-out decoding step (`models/step_plan.py`): bit for bit the layers' step on every
variant and product route, made once a search, and left to the layers where it does not apply."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch

from tests.conftest import SENTENCES, SPECIALS, padded_sources, tiny_model
from tests.test_bf16_decoding import needs_native
from transduce.decoding.search import beam_search
from transduce.models import bf16_decoding, int8, matmul, step_plan
from transduce.models.bf16_decoding import bf16_products
from transduce.models.int8 import int8_products
from transduce.models.transformer import DecoderLayer

VARIANTS = {
    "post-norm": {},
    "pre-norm": {"pre_norm": True},
    "d_k != d_v, 3 heads": {"h": 3, "d_k": 4, "d_v": 6},
    "learned positions, untied": {"positions": "learned", "tie_output": False},
    "separate embeddings, 3 layers": {"share_embeddings": False, "n_layers": 3},
}


def _twins(dtype=torch.float64, **changes):
    """Two models with the same weights: one steps through the plan, one through the layers."""
    planned, layered = tiny_model(dtype=dtype, **changes), tiny_model(dtype=dtype, **changes)
    layered.written_out_steps = False
    return planned, layered


def _a_search_by_hand(model, src) -> list[torch.Tensor]:
    """Steps as beam search takes them: a row a sentence, widened to 3 beams, a sentence
    dropped, rows reordered, and a dozen steps more (past any of the sources' lengths)."""
    cache = model.init_cache(model.encode(src), 1)
    n = src.size(0)
    tokens = torch.arange(n).view(-1, 1) % 7 + 4
    outputs = [model.step(tokens, cache)]
    cache.reorder(torch.arange(n).repeat_interleave(3), group=3)
    tokens = torch.arange(3 * n).view(-1, 1) % 8 + 4
    for t in range(14):
        outputs.append(model.step(tokens, cache))
        rows = torch.arange(cache.group * cache.src_pad_mask.size(0)).flip(0)
        if t == 2:  # the first sentence ends: its beams go
            rows = rows[rows >= 3]
        cache.reorder(rows)
        tokens = outputs[-1][rows].argmax(dim=-1, keepdim=True)
    return outputs


def _every_product_onednn(monkeypatch) -> None:
    """The route on for decoding, and for weights of any size (the tests' are all small)."""
    monkeypatch.setattr(matmul, "_enabled", matmul.Route(training=False, decoding=True))
    monkeypatch.setattr(matmul, "MKL_WEIGHT_ENTRIES", 0)


def _some_products_lowered(monkeypatch, module) -> None:
    """int8's or bfloat16's bar (multiply-adds) where the toy's products cross it both ways:
    with 4 sentences widened to 12 rows and down to 9, a 16 x 16 weight takes it at 12 rows
    and not at 9, the 48 x 16 stacked projections at every count, the 12 x 16 output never."""
    monkeypatch.setattr(module, "MIN_MULTIPLY_ADDS", 12 * 16 * 16)
    if module is int8:
        monkeypatch.setattr(int8, "MIN_WEIGHT", None)
    else:
        monkeypatch.setattr(bf16_decoding, "MIN_ROWS", 1 << 30)


ROUTES = {
    "as decoding takes them": lambda monkeypatch: matmul.packed_for_inference(),
    "every product oneDNN, prepacked": lambda monkeypatch: (
        _every_product_onednn(monkeypatch) or matmul.packed_for_inference()
    ),
    "oneDNN unpacked": lambda monkeypatch: _every_product_onednn(monkeypatch) or nullcontext(),
    "int8's context": lambda monkeypatch: int8_products(),
    "int8 on some products": lambda monkeypatch: (
        _some_products_lowered(monkeypatch, int8) or int8_products()
    ),
    "bfloat16 on some products": lambda monkeypatch: (
        _some_products_lowered(monkeypatch, bf16_decoding) or bf16_products()
    ),
}


def _route_params():
    """The bfloat16 route where this CPU multiplies bfloat16 in hardware, the only CPUs decoding
    takes it on."""
    return [pytest.param(r, marks=needs_native) if "bfloat16" in r else r for r in ROUTES]


@pytest.mark.parametrize("route", _route_params())
@pytest.mark.parametrize("variant", VARIANTS)
def test_written_out_steps_equal_the_layers_bit_for_bit(variant, route, monkeypatch):
    planned, layered = _twins(torch.float32, **VARIANTS[variant])
    src = padded_sources(SENTENCES)
    with torch.no_grad(), ROUTES[route](monkeypatch):
        ours, theirs = _a_search_by_hand(planned, src), _a_search_by_hand(layered, src)
    assert len(ours) == len(theirs) == 15
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert torch.equal(a, b), f"step {step} differs by {(a - b).abs().max()}"


def test_the_plan_decodes_a_beam_search_made_once_and_the_layers_are_not_called(monkeypatch):
    planned, layered = _twins()
    src = padded_sources(SENTENCES)
    with torch.no_grad():
        expected = beam_search(layered, src, **SPECIALS, max_len_b=12)
    made = []
    original = step_plan.StepPlan.__init__
    monkeypatch.setattr(
        step_plan.StepPlan, "__init__", lambda self, *a, **k: made.append(original(self, *a, **k))
    )

    def refused(*args, **kwargs):
        raise AssertionError("a decoder layer was called")

    monkeypatch.setattr(DecoderLayer, "forward", refused)
    with torch.no_grad():
        got = beam_search(planned, src, **SPECIALS, max_len_b=12)
    assert len(made) == 1
    assert [[h.tokens for h in s] for s in got] == [[h.tokens for h in s] for s in expected]
    assert [[h.score for h in s] for s in got] == [[h.score for h in s] for s in expected]


def test_a_hooked_module_is_called_at_every_step(model):
    """`transduce explain` and a user's probes hook the layers: the plan steps aside for them."""
    calls = []
    model.decoder_layers[1].ffn.w_1.register_forward_hook(lambda *_: calls.append(1))
    cache = _cache(model)
    with torch.no_grad():
        for _ in range(3):
            model.step(torch.full((len(SENTENCES), 1), 5), cache)
    assert len(calls) == 3


def _layer_calls(model, monkeypatch, context=torch.no_grad) -> int:
    """How many decoder layer calls two steps made (counted without a hook, which would itself
    send the steps through the layers)."""
    calls, forward = [], DecoderLayer.forward
    counted = lambda *args, **named: calls.append(1) or forward(*args, **named)  # noqa: E731
    monkeypatch.setattr(DecoderLayer, "forward", counted)
    cache = _cache(model)
    with context():
        for _ in range(2):
            model.step(torch.full((len(SENTENCES), 1), 5), cache)
    return len(calls)


def test_a_plain_model_steps_without_its_layers(model, monkeypatch):
    assert _layer_calls(model, monkeypatch) == 0


@pytest.mark.parametrize(
    "case", ["training", "gradients", "a global hook", "a swapped layer", "an unplanned model"]
)
def test_the_layers_step_where_the_plan_does_not_apply(case, model, monkeypatch):
    context = nullcontext if case == "gradients" else torch.no_grad
    if case == "training":
        model.train()
    if case == "a swapped layer":
        model.decoder_layers[1].ffn.w_2 = torch.nn.Linear(32, 16).double()
    if case == "an unplanned model":
        model.written_out_steps = False
    hook = torch.nn.modules.module.register_module_forward_hook(lambda *_: None)
    if case != "a global hook":
        hook.remove()
    try:
        assert _layer_calls(model, monkeypatch, context) == 2 * model.config.decoder_depth
    finally:
        hook.remove()


def _cache(model):
    return model.init_cache(model.encode(padded_sources(SENTENCES)), 1)


@pytest.mark.skipif(not matmul._can_pack, reason="this PyTorch has no oneDNN packing")
def test_the_plans_products_read_the_weights_prepacked(monkeypatch):
    """Prepacked weights are what make oneDNN's small products fast (`matmul`): the plan takes
    the packed copies, as the layers' products did, and a packed copy is oneDNN's own layout."""
    _every_product_onednn(monkeypatch)
    planned = tiny_model(dtype=torch.float32)
    with torch.no_grad(), matmul.packed_for_inference():
        cache = _cache(planned)
        planned.step(torch.full((len(SENTENCES), 1), 5), cache)
    products = [cache.plan.output]
    for layer in cache.plan.layers:
        products += [layer.qkv, layer.self_out, layer.cross_q, layer.cross_out, layer.ffn_in]
        products.append(layer.ffn_out)
    assert len(products) == 1 + 6 * planned.config.decoder_depth
    assert all(product.keywords["weight"].is_mkldnn for product in products)
