"""Decoding's products in bfloat16 (models/bf16_decoding.py): which CPUs `auto` takes there, which
products take it, its arithmetic, and beam search with it against float32."""

import pytest
import torch
import torch.nn.functional as F

from transduce.config import ConfigError, DecodeConfig
from transduce.decoding.translate import decode_ids
from transduce.models import bf16_decoding
from transduce.models.bf16_decoding import bf16_products, chosen, maybe_bf16
from transduce.models.matmul import linear

from .conftest import tiny_model
from .test_int8 import FakeVocab

CPU, GPU = torch.device("cpu"), torch.device("cuda")  # `chosen` only reads the device's kind
NATIVE = bf16_decoding.available and (bf16_decoding._avx512_bf16 or bf16_decoding._amx)
needs_native = pytest.mark.skipif(not NATIVE, reason="this CPU has no bfloat16 products")


def _cpu_with(monkeypatch, avx512_bf16: bool, amx: bool) -> None:
    monkeypatch.setattr(bf16_decoding, "available", True)
    monkeypatch.setattr(bf16_decoding, "_avx512_bf16", avx512_bf16)
    monkeypatch.setattr(bf16_decoding, "_amx", amx)


@pytest.mark.parametrize(
    "avx512_bf16, amx, taken", [(True, False, True), (True, True, False), (False, False, False)]
)
def test_auto_takes_the_route_on_a_cpu_with_avx512_bf16_and_no_amx(
    monkeypatch, avx512_bf16, amx, taken
):
    """AMX's bfloat16 products were no gain at decoding's short shapes (session 48): auto leaves
    those CPUs in float32, as it does a CPU that would emulate bfloat16 and every GPU."""
    _cpu_with(monkeypatch, avx512_bf16, amx)
    assert chosen("auto", CPU) is taken
    assert chosen("fp32", CPU) is False and chosen("auto", GPU) is False
    if avx512_bf16 or amx:
        assert chosen("bf16", CPU) is True  # asked for: taken on AMX too


def test_bf16_is_refused_where_it_would_be_emulated_or_on_a_gpu(monkeypatch):
    _cpu_with(monkeypatch, avx512_bf16=False, amx=False)
    with pytest.raises(ConfigError, match="needs bfloat16 products in hardware"):
        chosen("bf16", CPU)
    with pytest.raises(ConfigError, match="a CPU route: on a GPU, leave it at auto"):
        chosen("bf16", GPU)
    with pytest.raises(ConfigError, match=r"decode\.precision must be one of"):
        DecodeConfig(precision="fp16")


def test_only_wide_weights_and_large_products_take_the_route():
    """A weight 256 wide both ways from 64 rows; a narrower one from 2^25 multiply-adds (`tiny`'s
    output projection over 8,000 pieces from 64 rows); never a sentence at a time (4 rows) at
    `small`, nor `tiny`'s 128-wide layers at decoding's 4-256 rows, nor the tests' toys."""
    worth_it = bf16_decoding._worth_it
    assert worth_it(64, torch.empty(256, 256)) and not worth_it(63, torch.empty(256, 256))
    assert not worth_it(4, torch.empty(8000, 256)) and worth_it(4, torch.empty(32000, 512))
    assert not worth_it(256, torch.empty(512, 128)) and not worth_it(256, torch.empty(384, 128))
    assert worth_it(64, torch.empty(8000, 128)) and not worth_it(4, torch.empty(8000, 128))
    assert not worth_it(256, torch.empty(64, 32))


@needs_native
def test_a_product_rounds_its_inputs_and_output_to_bfloat16_and_adds_the_bias_in_float32():
    torch.manual_seed(0)
    x, weight, bias = torch.randn(64, 256), torch.randn(256, 256) / 16, torch.randn(256)
    assert maybe_bf16(x, weight, bias) is None  # outside the context: float32's business
    with bf16_products():
        product, with_bias = maybe_bf16(x, weight, None), maybe_bf16(x, weight, bias)
        assert maybe_bf16(x[:, :128], torch.randn(128, 128), None) is None  # too small
        assert maybe_bf16(x.double(), weight.double(), None) is None  # float32 only
    rounded = x.bfloat16().double() @ weight.bfloat16().double().t()  # exact sums of the inputs
    assert torch.equal(product.bfloat16().float(), product)  # the output rounded to bfloat16
    assert ((product - rounded).abs() <= 2**-8 * rounded.abs() + 1e-6).all()  # one step at most
    torch.testing.assert_close(with_bias - product, bias.expand_as(product))  # float32's bias
    exact = F.linear(x, weight, bias)
    assert 0 < (with_bias - exact).abs().max() < 0.02 * exact.abs().max()


@needs_native
def test_only_products_without_gradients_take_it_and_a_changed_weight_is_copied_again():
    torch.manual_seed(0)
    x, weight = torch.randn(64, 256), torch.randn(256, 256) / 16
    store: bf16_decoding.Bf16Weights = {}
    with torch.no_grad(), bf16_products(store):
        before = linear(x, weight)
        weight.mul_(2)  # e.g. an optimizer step between two validations
        after = linear(x, weight)
    assert list(store) == [id(weight)] and not bf16_decoding.active()
    torch.testing.assert_close(after, 2 * before)
    trained = weight.clone().requires_grad_()
    with bf16_products(store):
        assert linear(x, trained).grad_fn is not None  # training's products are not this route's
    assert id(trained) not in store


@needs_native
def test_beam_search_in_bfloat16_keeps_float32s_choices_on_a_wide_model(monkeypatch):
    """A model 256 wide decodes with every product in bfloat16, when its decode settings say so:
    the beam keeps float32's hypotheses, their scores within bfloat16's rounding."""
    monkeypatch.setattr(bf16_decoding, "MIN_ROWS", 1)  # the toy's beams are 3-9 rows
    model = tiny_model(dtype=torch.float32, d_model=256, d_ff=512, h=4, d_k=64, d_v=64,
                       vocab_size=300)  # fmt: skip
    model.tgt_embed.tokens.weight.data.mul_(8)  # a sharper output distribution than at random
    sources = [[4, 5, 6, 7, 8, 9], [10, 11, 4], [5, 5, 6]]
    fp32, bf16 = (DecodeConfig(beam_size=3, precision=p) for p in ("fp32", "bf16"))
    exact = decode_ids(model, FakeVocab(), sources, fp32, CPU)
    store: bf16_decoding.Bf16Weights = {}
    low = decode_ids(model, FakeVocab(), sources, bf16, CPU, bf16_weights=store)
    assert id(model.tgt_embed.tokens.weight) in store and len(store) > 8  # every wide product
    for ours, theirs in zip(low, exact, strict=True):
        assert ours[0].tokens == theirs[0].tokens
        assert ours[0].score == pytest.approx(theirs[0].score, rel=0.02)
        assert ours[0].score != theirs[0].score  # rounded: the route was taken
