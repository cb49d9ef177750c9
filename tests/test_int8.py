"""int8 products for CPU decoding (models/int8.py): the quantization's arithmetic, which products
take it, and beam search with it against float32."""

import importlib
import warnings

import pytest
import torch
import torch.nn.functional as F

from transduce.config import DecodeConfig
from transduce.decoding.translate import Translator, decode_ids
from transduce.models import int8
from transduce.models.int8 import Int8Weight, int8_products, maybe_int8
from transduce.models.matmul import linear

from .conftest import tiny_model

pytestmark = pytest.mark.skipif(not int8.available, reason="this PyTorch has no oneDNN")


@pytest.fixture
def every_product(monkeypatch):
    """Every product in int8, however small: the toy models' are all below the threshold."""
    monkeypatch.setattr(int8, "MIN_MULTIPLY_ADDS", 0)


def _dequantized(weight: Int8Weight, n_in: int) -> torch.Tensor:
    """The int8 weight read back through a product with the identity."""
    eye = torch.eye(n_in, dtype=torch.uint8)
    return torch.ops.onednn.qlinear_pointwise(
        eye, 1.0, 0, weight.packed, weight.scales, weight.zero_points, None,
        1.0, 0, torch.float32, "none", [], "",
    ).t()  # fmt: skip


def test_weights_are_rounded_per_output_unit_to_within_half_a_step():
    torch.manual_seed(0)
    weight = torch.randn(24, 16) * torch.logspace(-3, 1, 24)[:, None]  # rows of unlike sizes
    q = Int8Weight.of(weight)
    torch.testing.assert_close(q.scales, weight.abs().amax(1) / 127)
    error = (_dequantized(q, 16) - weight).abs()
    assert (error <= q.scales[:, None] / 2 + 1e-7).all()
    assert error.amax() > 0  # rounded, not copied


def test_a_weight_row_of_zeros_gets_a_scale_not_a_division_by_zero():
    """The tied output projection's padding row is all zeros."""
    weight = torch.randn(4, 16)
    weight[0] = 0
    q = Int8Weight.of(weight)
    assert (q.scales > 0).all()
    torch.testing.assert_close(_dequantized(q, 16)[0], torch.zeros(16))


def test_a_nested_context_shares_the_outer_store_and_leaves_it_open(every_product):
    x, weight = torch.randn(4, 16), torch.randn(8, 16)
    outer: int8.Int8Weights = {}
    inner: int8.Int8Weights = {}
    with torch.no_grad(), int8_products(outer):
        with int8_products(inner):
            linear(x, weight)
        assert int8.active()  # the inner context's exit closes nothing of the outer one
    assert list(outer) == [id(weight)] and not inner and not int8.active()


def test_input_rows_are_rounded_to_uint8_over_a_range_holding_zero():
    x = torch.tensor([[0.5, 2.0, 1.0], [1.0, 0.25, 3.0]])  # all positive: 0 widens the range
    q, scale, zero_point = int8._quantized_rows(x)
    assert q.dtype == torch.uint8 and zero_point == 0 and scale == pytest.approx(3.0 / int8.ROW_MAX)
    assert ((q.float() - zero_point) * scale - x).abs().max() <= scale / 2 + 1e-7
    x = torch.tensor([[-0.3, 0.0, 1.7]])
    q, scale, zero_point = int8._quantized_rows(x)
    assert q[0, 1] == zero_point and (q[0, 1].float() - zero_point) * scale == 0  # exact zero
    assert ((q.float() - zero_point) * scale - x).abs().max() <= scale / 2 + 1e-7
    q, scale, zero_point = int8._quantized_rows(torch.tensor([[-1.0, 0.0, 0.5]]))
    assert zero_point == round(1.0 / scale) and q.tolist() == [[0, zero_point, int8.ROW_MAX]]
    q, scale, zero_point = int8._quantized_rows(torch.zeros(2, 3))  # no range at all
    assert scale == 1.0 and zero_point == 0 and not q.any()
    x = torch.tensor([[-3.0, -1.0, -0.5]])  # all negative: 0 widens the range too
    q, scale, zero_point = int8._quantized_rows(x)
    assert zero_point == int8.ROW_MAX and scale == pytest.approx(3.0 / int8.ROW_MAX)
    assert ((q.float() - zero_point) * scale - x).abs().max() <= scale / 2 + 1e-7


def test_input_rows_stay_within_row_max_where_two_roundings_to_even_add_up():
    # scale 1 and -low 11.5: the zero point rounds up to 12, the top (ROW_MAX - 11.5) rounds
    # down by only half, so q would be ROW_MAX + 1 unclamped (0 after uint8 wraps at 255)
    q, scale, zero_point = int8._quantized_rows(torch.tensor([[-11.5, int8.ROW_MAX - 11.5]]))
    assert (scale, zero_point) == (1.0, 12)
    assert q.tolist() == [[0, int8.ROW_MAX]]


def test_rows_keep_to_7_bits_where_the_cpu_sums_u8_x_s8_pairs_in_int16():
    # Without VNNI a product of 8-bit rows saturates (see int8.ROW_MAX): the closeness test
    # below fails there with 255.
    expected = 255 if torch.cpu._is_vnni_supported() else 127
    assert expected == int8.ROW_MAX


def test_the_cpus_instructions_choose_the_row_bits_and_thresholds(monkeypatch):
    """Read once, on import: VNNI's 8-bit rows and large-weight exception, or the stricter
    settings without it, or where this PyTorch cannot tell."""
    try:
        monkeypatch.setattr(torch.cpu, "_is_vnni_supported", lambda: True, raising=False)
        importlib.reload(int8)
        assert (int8.ROW_MAX, int8.MIN_MULTIPLY_ADDS, int8.MIN_WEIGHT) == (255, 1 << 24, 1 << 20)
        monkeypatch.delattr(torch.cpu, "_is_vnni_supported")
        importlib.reload(int8)
        assert (int8.ROW_MAX, int8.MIN_MULTIPLY_ADDS, int8.MIN_WEIGHT) == (127, 3 << 24, None)
    finally:
        monkeypatch.undo()
        importlib.reload(int8)


def test_without_onednn_the_context_opens_nothing(every_product, monkeypatch):
    monkeypatch.setattr(int8, "available", False)
    x, weight = torch.randn(4, 16), torch.randn(8, 16)
    with torch.no_grad(), int8_products():
        assert not int8.active()
        assert torch.equal(linear(x, weight), F.linear(x, weight))


def test_an_int8_product_is_close_to_the_float_one(every_product):
    torch.manual_seed(0)
    x, weight, bias = torch.randn(40, 64), torch.randn(96, 64) / 8, torch.randn(96)
    exact = F.linear(x, weight, bias)
    assert maybe_int8(x, weight, bias) is None  # outside the context: float32's business
    with int8_products():
        approx = maybe_int8(x, weight, bias)
    error = (approx - exact).abs().max() / exact.abs().max()
    assert 0 < error < 0.02


def test_only_products_without_gradients_and_above_the_threshold_take_int8(monkeypatch):
    torch.manual_seed(0)
    x, weight = torch.randn(8, 64), torch.randn(32, 64)
    monkeypatch.setattr(int8, "MIN_MULTIPLY_ADDS", 8 * 64 * 32 + 1)  # one short
    store: int8.Int8Weights = {}
    with torch.no_grad(), int8_products(store):
        below = linear(x, weight)
    assert not store and torch.equal(below, linear(x, weight))
    monkeypatch.setattr(int8, "MIN_MULTIPLY_ADDS", 8 * 64 * 32)  # just there
    with torch.no_grad(), int8_products(store):
        at = linear(x, weight)
    assert list(store) == [id(weight)] and not torch.equal(at, linear(x, weight))
    # A weight large enough that reading it is the cost goes int8 whatever the rows.
    monkeypatch.setattr(int8, "MIN_MULTIPLY_ADDS", 1 << 60)
    monkeypatch.setattr(int8, "MIN_WEIGHT", weight.numel())
    with torch.no_grad(), int8_products():
        one_row = linear(x[:1], weight)
    assert not torch.equal(one_row, linear(x[:1], weight))
    # Without VNNI there is no such exception (int8 took 2x as long at 4 rows there).
    monkeypatch.setattr(int8, "MIN_WEIGHT", None)
    untouched: int8.Int8Weights = {}
    with torch.no_grad(), int8_products(untouched):
        one_row = linear(x[:1], weight)
    assert not untouched and torch.equal(one_row, linear(x[:1], weight))
    trained = weight.clone().requires_grad_()
    monkeypatch.setattr(int8, "MIN_MULTIPLY_ADDS", 0)  # size no reason to stay float32 below
    with int8_products(store):
        assert linear(x, trained).grad_fn is not None  # training's products stay float32
        assert maybe_int8(x.double(), weight.double(), None) is None  # float32 only
        assert maybe_int8(x, weight.double(), None) is None  # both float32
        assert maybe_int8(x.to("meta"), weight.to("meta"), None) is None  # the CPU only
        with monkeypatch.context() as compiling:  # torch.compile lowers the float product itself
            compiling.setattr(torch.compiler, "is_compiling", lambda: True)
            assert maybe_int8(x, weight, None) is None
    assert id(trained) not in store


def test_a_weight_changed_in_place_is_quantized_again(every_product):
    torch.manual_seed(0)
    x, weight = torch.randn(4, 16), torch.randn(8, 16)
    store: int8.Int8Weights = {}
    with torch.no_grad(), int8_products(store):
        before = linear(x, weight)
        weight.mul_(2)  # e.g. an optimizer step between two validations
        after = linear(x, weight)
    torch.testing.assert_close(after, 2 * before, rtol=0.02, atol=0.02)


def test_int8_beam_search_stays_close_to_float32_with_no_deprecation_warning(every_product):
    model = tiny_model(dtype=torch.float32, d_model=64, d_ff=128, h=4, d_k=16, d_v=16)
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    sources = [[4, 5, 6, 7, 8, 9], [10, 11, 4], [5, 5, 6]]
    cpu, decode = torch.device("cpu"), DecodeConfig(beam_size=3)
    exact = decode_ids(model, FakeVocab(), sources, decode, cpu)
    store: int8.Int8Weights = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch.ao's route warned on every call
        approx = decode_ids(model, FakeVocab(), sources, decode, cpu, None, store)
    # Every product took int8: each linear layer, the decoder's self-attention projections as
    # the one product of their stacked weights, and the tied output projection.
    stacked = [layer.self_attn._stacked_qkv()[0] for layer in model.decoder_layers]
    assert len(store) == n_linear - 2 * len(stacked) + 1
    assert all(id(weight) in store for weight in [*stacked, model.tgt_embed.tokens.weight])
    for ours, theirs in zip(approx, exact, strict=True):
        assert ours[0].tokens == theirs[0].tokens
        assert ours[0].score == pytest.approx(theirs[0].score, rel=0.02)
        assert ours[0].score != theirs[0].score
    # A store kept between calls (a translator's) is not quantized again.
    quantized = {key: entry[2] for key, entry in store.items()}
    assert decode_ids(model, FakeVocab(), sources, decode, cpu, None, store) == approx
    assert all(store[key][2] is weight for key, weight in quantized.items())


def test_a_translator_opens_an_int8_store_and_refuses_a_gpu_or_no_onednn(monkeypatch):
    model = tiny_model(dtype=torch.float32)
    translator = Translator(model, None, DecodeConfig(), torch.device("cpu"), int8=True)
    assert translator.int8_weights == {}
    with pytest.raises(ValueError, match="for the CPU"):
        Translator(model, None, DecodeConfig(), torch.device("meta"), int8=True)
    monkeypatch.setattr("transduce.decoding.translate.int8_available", False)
    with pytest.raises(ValueError, match="oneDNN"):
        Translator(model, None, DecodeConfig(), torch.device("cpu"), int8=True)


class FakeVocab:
    pad, unk, bos, eos = 0, 1, 2, 3
