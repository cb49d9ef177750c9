"""The oneDNN route for float32 CPU products: same values and gradients as torch, taken when it
should be and only then."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import BOS, EOS, PAD, tiny_model
from transduce.decoding.search import beam_search
from transduce.models import bf16_decoding, int8, matmul
from transduce.models.matmul import Linear, linear

pytestmark = pytest.mark.skipif(not matmul._available, reason="this torch has no oneDNN")


@pytest.fixture
def onednn_calls(monkeypatch):
    """Count the products that went through oneDNN, with the route switched on for products of
    every size (the tests' weights are far below `MKL_WEIGHT_ENTRIES`)."""
    calls = []
    real = matmul._onednn

    def counting(x, weight, bias):
        calls.append("packed" if weight.is_mkldnn else "plain")
        return real(x, weight, bias)

    monkeypatch.setattr(matmul, "_onednn", counting)
    monkeypatch.setattr(matmul, "MKL_WEIGHT_ENTRIES", 0)
    old = matmul.use_onednn(True)
    yield calls
    matmul.use_onednn(old)


# (out, in) both ways round: the weight gradient picks its product by which side is wider
@pytest.mark.parametrize("n_out, n_in", [(48, 20), (20, 48)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_values_and_gradients_equal_torch(onednn_calls, n_out, n_in, with_bias):
    torch.manual_seed(0)
    x = torch.randn(3, 7, n_in, requires_grad=True)  # (B, T, K): leading dims are flattened
    weight = torch.randn(n_out, n_in, requires_grad=True)
    bias = torch.randn(n_out, requires_grad=True) if with_bias else None
    grad_out = torch.randn(3, 7, n_out)

    def run(f):
        for t in (x, weight, bias):
            if t is not None:
                t.grad = None
        y = f(x, weight, bias)
        y.backward(grad_out)
        return y.detach(), x.grad, weight.grad, None if bias is None else bias.grad

    ours, reference = run(linear), run(F.linear)
    assert len(onednn_calls) == 3  # forward, dL/dx, dL/dW
    assert ours[0].shape == (3, 7, n_out)
    for a, b in zip(ours, reference, strict=True):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_only_what_needs_a_gradient_is_computed(onednn_calls):
    x, weight = torch.randn(5, 8), torch.randn(6, 8, requires_grad=True)
    linear(x, weight).sum().backward()
    assert len(onednn_calls) == 2  # forward and dL/dW: x needs no gradient
    assert x.grad is None and weight.grad.shape == (6, 8)


def test_a_bias_alone_still_gets_its_gradient(onednn_calls):
    x, weight, bias = torch.randn(5, 8), torch.randn(6, 8), torch.zeros(6, requires_grad=True)
    linear(x, weight, bias).sum().backward()
    torch.testing.assert_close(bias.grad, torch.full((6,), 5.0))


@pytest.mark.parametrize("n_out, n_in", [(12, 8), (8, 12)])
def test_odd_layouts_a_summed_loss_and_a_vector(onednn_calls, n_out, n_in):
    # .sum() sends back a gradient with zero strides; x.t() is a transposed view
    x = torch.randn(n_in, 5).t().requires_grad_()
    weight = torch.randn(n_out, n_in, requires_grad=True)
    linear(x, weight).sum().backward()
    ours = x.grad.clone(), weight.grad.clone()
    x.grad = weight.grad = None
    F.linear(x, weight).sum().backward()
    torch.testing.assert_close(ours, (x.grad, weight.grad), rtol=1e-5, atol=1e-5)
    vector = torch.randn(n_in)
    torch.testing.assert_close(linear(vector, weight), F.linear(vector, weight))


def test_second_derivatives_fail_loudly(onednn_calls):
    x = torch.randn(5, 8, requires_grad=True)
    weight = torch.randn(6, 8, requires_grad=True)
    (grad_x,) = torch.autograd.grad(linear(x, weight).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=r"once_differentiable|differentiate"):
        grad_x.sum().backward()


def test_inference_builds_no_graph(onednn_calls):
    layer = Linear(8, 6)
    with torch.no_grad():
        y = layer(torch.randn(4, 8))
    assert y.grad_fn is None and len(onednn_calls) == 1


def test_decoding_leaves_small_products_to_mkl_and_training_does_not(onednn_calls, monkeypatch):
    """Without gradients, up to MKL_ROWS rows by a weight of up to MKL_WEIGHT_ENTRIES go to
    torch's own product (MKL); more rows, a larger weight, or a gradient take oneDNN."""
    monkeypatch.setattr(matmul, "MKL_ROWS", 4)
    monkeypatch.setattr(matmul, "MKL_WEIGHT_ENTRIES", 6 * 8)
    weight = torch.randn(6, 8)
    x = torch.randn(2, 2, 8)
    with torch.no_grad(), matmul.packed_for_inference():
        torch.testing.assert_close(linear(x, weight), F.linear(x, weight))  # 4 rows: MKL
        assert onednn_calls == []
        linear(torch.randn(5, 8), weight)  # 5 rows
        linear(torch.randn(3, 2, 8), weight)  # 6 rows, however few along each leading dim
        linear(torch.randn(4, 8), torch.randn(7, 8))  # a larger weight
    linear(torch.randn(4, 8), weight.requires_grad_())  # training
    assert onednn_calls == ["packed", "packed", "packed", "plain"]


@pytest.mark.parametrize("rows, n_out", [(4, 6), (5, 6), (4, 7)])
@pytest.mark.parametrize("context", ["packed", "plain", "route off"])
def test_a_product_chosen_once_takes_linears_route_and_its_values(
    onednn_calls, monkeypatch, rows, n_out, context
):
    """`product_for_decoding` (the decoding step's plan) routes each product as `linear`
    would, by the weight's size and the row count, and gives the same values bit for bit."""
    monkeypatch.setattr(matmul, "MKL_ROWS", 4)
    monkeypatch.setattr(matmul, "MKL_WEIGHT_ENTRIES", 6 * 8)
    if context == "route off":
        matmul.use_onednn(False)
    weight, bias, x = torch.randn(n_out, 8), torch.randn(n_out), torch.randn(rows, 8)
    packing = matmul.packed_for_inference() if context == "packed" else nullcontext()
    with torch.no_grad(), packing:
        expected = linear(x, weight, bias)
        by_linear = list(onednn_calls)
        got = matmul.product_for_decoding(weight, bias)(x)
    assert torch.equal(got, expected)
    assert onednn_calls == by_linear * 2
    with_mkl = context == "route off" or (rows, n_out) == (4, 6)  # 4 rows by a small weight
    assert len(by_linear) == (0 if with_mkl else 1)


@pytest.mark.skipif(not int8.available, reason="this torch has no oneDNN int8 products")
def test_inside_int8_a_product_chosen_once_takes_int8_by_the_row_count_without_linear(
    onednn_calls, monkeypatch
):
    """Inside `int8_products` the plan's product is int8 where `linear`'s would be (the bar is
    rows x weight entries) and float32's chosen route elsewhere, its values `linear`'s bit for
    bit, and `linear` itself is never called: a sentence at a time on a CPU without VNNI keeps
    the float32 route's speed under `--int8`."""
    monkeypatch.setattr(int8, "MIN_MULTIPLY_ADDS", 8 * 6 * 8)
    monkeypatch.setattr(int8, "MIN_WEIGHT", None)
    quantized = []
    real = int8._product
    monkeypatch.setattr(int8, "_product", lambda *a: quantized.append(1) or real(*a))
    weight, bias = torch.randn(6, 8), torch.randn(6)
    with torch.no_grad(), int8.int8_products():
        expected = {rows: linear(torch.ones(rows, 8) * rows, weight, bias) for rows in (7, 8)}
        assert len(quantized) == 1 and len(onednn_calls) == 1  # 8 rows int8, 7 float32
        monkeypatch.setattr(matmul, "linear", None)  # the plan's products never call it
        product = matmul.product_for_decoding(weight, bias)
        for rows in (7, 8):
            assert torch.equal(product(torch.ones(rows, 8) * rows), expected[rows])
    assert len(quantized) == 2 and len(onednn_calls) == 2
    with torch.no_grad():  # outside the context: float32
        assert matmul.product_for_decoding(weight, bias)(torch.ones(8, 8)).equal(
            linear(torch.ones(8, 8), weight, bias)
        )
    assert len(quantized) == 2


@pytest.mark.skipif(not int8.available, reason="this torch has no oneDNN int8 products")
def test_with_int8_and_bfloat16_both_open_a_product_takes_the_route_linear_takes(monkeypatch):
    """Both contexts open (any CPU: their products replaced by tagged stand-ins): int8 first where
    its bar is met, bfloat16 where only its bar is, float32 below both and for an input that is
    not float32 (autocast's bfloat16), as `linear` routes each."""
    monkeypatch.setattr(int8, "MIN_MULTIPLY_ADDS", 8 * 6 * 8)
    monkeypatch.setattr(int8, "MIN_WEIGHT", None)
    monkeypatch.setattr(bf16_decoding, "MIN_MULTIPLY_ADDS", 6 * 6 * 8)
    monkeypatch.setattr(bf16_decoding, "MIN_ROWS", 1 << 30)
    monkeypatch.setattr(bf16_decoding, "_packed_copy", lambda weight: weight)
    monkeypatch.setattr(int8, "_product", lambda x, w, bias: torch.full((x.size(0), 6), 8.0))
    monkeypatch.setattr(
        bf16_decoding, "_product", lambda x, w, bias: torch.full((x.size(0), 6), 16.0)
    )
    weight, bias = torch.randn(6, 8), torch.randn(6)
    routes = {}
    with torch.no_grad(), int8.int8_products(), bf16_decoding.bf16_products():
        for rows in (5, 6, 8):
            x = torch.randn(rows, 8)
            got = matmul.product_for_decoding(weight, bias)(x)
            assert torch.equal(got, linear(x, weight, bias))
            routes[rows] = {8.0: "int8", 16.0: "bfloat16"}.get(got[0, 0].item(), "float32")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            x = torch.randn(8, 8).bfloat16()
            got = matmul.product_for_decoding(weight, bias)(x)
            assert got.dtype == torch.bfloat16 and torch.equal(got, linear(x, weight, bias))
    assert routes == {5: "float32", 6: "bfloat16", 8: "int8"}


def test_only_float32_cpu_outside_autocast_and_compile_takes_the_route(onednn_calls, monkeypatch):
    weight = torch.randn(6, 8, dtype=torch.float64)
    linear(torch.randn(4, 8, dtype=torch.float64), weight)  # the float64 tests' reference path
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = linear(torch.randn(4, 8), weight.float())
    assert y.dtype == torch.bfloat16  # autocast still applies: torch's own linear ran
    linear(torch.randn(0, 8), weight.float())  # no rows
    with monkeypatch.context() as inside:  # torch.compile's CPU backend calls oneDNN itself
        inside.setattr(torch.compiler, "is_compiling", lambda: True)
        linear(torch.randn(4, 8), weight.float())
    assert onednn_calls == []
    matmul.use_onednn(False)
    linear(torch.randn(4, 8), weight.float())
    assert onednn_calls == []


def test_packed_weights_give_the_same_products_and_never_go_stale(onednn_calls):
    layer = Linear(8, 6)
    x = torch.randn(5, 8)
    with torch.no_grad():
        plain = layer(x)
        with matmul.packed_for_inference():
            assert matmul._packing.store == {}  # packed on first use, not before
            packed = layer(x)
            assert len(matmul._packing.store) == 1
            layer.weight.add_(1.0)  # an optimizer step inside: packed afresh
            changed = layer(x)
        assert matmul._packing.store is None  # dropped on exit
    assert onednn_calls == ["plain", "packed", "packed"]
    torch.testing.assert_close(packed, plain, rtol=0, atol=0)
    torch.testing.assert_close(changed, plain + x.sum(1, keepdim=True), rtol=1e-5, atol=1e-5)


def test_a_weight_made_under_inference_mode_is_read_unpacked_and_never_stale(onednn_calls):
    """An inference tensor has no version counter: a packed copy of it could not tell that it
    was changed in place since."""
    with torch.inference_mode(), matmul.packed_for_inference():
        weight, x = torch.randn(6, 8), torch.randn(5, 8)
        before = linear(x, weight)
        weight.add_(1.0)
        after = linear(x, weight)
    assert onednn_calls == ["plain", "plain"]
    torch.testing.assert_close(after, before + x.sum(1, keepdim=True), rtol=1e-5, atol=1e-5)


def test_the_stacked_self_attention_product_is_packed_under_inference_mode_too(onednn_calls):
    """`torch.inference_mode` (as speed_decode.py and many users call decoding) makes new
    tensors inference tensors, which are read unpacked: the stacked Q, K, V weight made inside
    it must not be one, or the decoder's widest product of every step is read unpacked."""
    from transduce.models.attention import MultiHeadAttention

    attention = MultiHeadAttention(d_model=8, h=2, d_k=4, d_v=4)
    x = torch.randn(3, 1, 8)
    with torch.inference_mode(), matmul.packed_for_inference():
        q, _, v = attention.project_qkv(x)
        attention.project_qkv(x)
    assert onednn_calls == ["packed", "packed"]
    torch.testing.assert_close(q, attention.project_q(x).detach())
    torch.testing.assert_close(v, attention.project_kv(x)[1].detach())


def test_packed_weights_are_dropped_by_the_outermost_exit_even_on_error(onednn_calls):
    layer = Linear(8, 6)
    with torch.no_grad(), pytest.raises(KeyboardInterrupt), matmul.packed_for_inference():
        with matmul.packed_for_inference():
            layer(torch.randn(2, 8))
        assert len(matmul._packing.store) == 1  # the inner exit keeps them
        raise KeyboardInterrupt
    assert matmul._packing.store is None


def test_a_kept_store_carries_the_packed_weights_from_call_to_call(onednn_calls):
    """A server's translator packs each weight once, not once per request; a weight changed
    in place is still packed afresh, and the store is the outermost context's."""
    layer, store = Linear(8, 6), {}
    x = torch.randn(5, 8)
    with torch.no_grad():
        with matmul.packed_for_inference(store):
            first = layer(x)
        ((_, _, packed),) = store.values()
        with matmul.packed_for_inference(), matmul.packed_for_inference(store):
            assert matmul._packing.store is not store  # nested: the outer context's store serves
        with matmul.packed_for_inference(store):
            again = layer(x)
        assert store[id(layer.weight)][2] is packed  # not packed a second time
        layer.weight.add_(1.0)
        with matmul.packed_for_inference(store):
            layer(x)
        assert store[id(layer.weight)][2] is not packed
    assert onednn_calls == ["packed"] * 3
    torch.testing.assert_close(again, first, rtol=0, atol=0)


def test_beam_search_finds_the_same_translations_either_way(onednn_calls):
    model = tiny_model(dtype=torch.float32, vocab_size=16)
    torch.manual_seed(3)
    src = torch.randint(4, 16, (6, 7))
    src[:, -1], src[2, 4:] = EOS, torch.tensor([EOS, PAD, PAD])

    def decode():
        hypotheses = beam_search(model, src, bos=BOS, eos=EOS, pad=PAD, beam_size=3, n_best=2)
        return [[(h.tokens, h.score) for h in hyps] for hyps in hypotheses]

    with matmul.packed_for_inference():
        fast = decode()
    assert "packed" in onednn_calls and "plain" not in onednn_calls
    matmul.use_onednn(False)
    reference = decode()
    assert [[t for t, _ in hyps] for hyps in fast] == [[t for t, _ in hyps] for hyps in reference]
    for ours, theirs in zip(fast, reference, strict=True):
        assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], abs=1e-5)


# Products of 100 row counts, as training's batches bring: the memory the process still holds
# after them (glibc's count of bytes in use), in MiB.
_HELD_AFTER_NEW_SHAPES = """
import ctypes, torch
from transduce.models.matmul import linear

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split())]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
torch.set_num_threads(1)
weight = torch.randn(256, 256, requires_grad=True)

def product(rows):
    linear(torch.randn(rows, 256, requires_grad=True), weight).sum().backward()

product(64)
before = libc.mallinfo2().uordblks
for rows in range(100, 200):
    product(rows)
print((libc.mallinfo2().uordblks - before) / 2**20)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="counts the heap through glibc's mallinfo2",
)
def test_products_of_ever_new_shapes_do_not_pile_up_in_onednn_caches():
    def held_mib(**cache_sizes: str) -> float:
        env = {k: v for k, v in os.environ.items() if not k.endswith("CACHE_CAPACITY")}
        env["TRANSDUCE_CPU_MATMUL"] = "onednn"  # on Intel's CPUs the default is MKL
        command = [sys.executable, "-c", _HELD_AFTER_NEW_SHAPES]
        done = subprocess.run(command, env={**env, **cache_sizes}, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return float(done.stdout.split()[-1])

    bounded = held_mib()  # the caches as transduce sets them
    libraries_default = held_mib(ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024", LRU_CACHE_CAPACITY="1024")
    assert libraries_default > 4 * bounded  # and a value the user set is kept
    # 8 entries hold 1.6 MiB here; 16 held 4.9 and 64 (sessions 9-13) 24.6: a looser bound
    # fragmented `small`'s heap by ~400 MiB (benchmarks/MEMORY.md, session 14)
    assert bounded < 4


def test_the_route_follows_the_cpu_unless_the_user_chooses(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    for vendor, intel in (("AuthenticAMD", False), ("GenuineIntel", True)):
        cpuinfo.write_text(f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: 25\n")
        assert matmul._intel_cpu(cpuinfo) is intel
    Route = matmul.Route
    # MKL picks slow kernels on other vendors' CPUs and fast ones on Intel's; without AVX-512
    # both run AVX2 kernels and MKL's train faster, while decoding keeps oneDNN's packed weights
    assert matmul._route("auto", intel_cpu=False, avx512=True) == Route(True, True)
    assert matmul._route("auto", intel_cpu=False, avx512=False) == Route(False, True)
    assert matmul._route("auto", intel_cpu=True, avx512=True) == Route(False, False)
    assert matmul._route("onednn", intel_cpu=True, avx512=False) == Route(True, True)
    assert matmul._route("torch", intel_cpu=False, avx512=True) == Route(False, False)
    with pytest.raises(ValueError, match="TRANSDUCE_CPU_MATMUL must be"):
        matmul._route("mkl", intel_cpu=False, avx512=True)


def test_the_vendor_comes_from_the_platform_where_there_is_no_proc_cpuinfo(tmp_path, monkeypatch):
    monkeypatch.setattr(platform, "processor", lambda: "Intel64 Family 6 Model 143, GenuineIntel")
    assert matmul._intel_cpu(tmp_path / "missing") is True
    monkeypatch.setattr(platform, "processor", lambda: "AMD64 Family 25 Model 1, AuthenticAMD")
    assert matmul._intel_cpu(tmp_path / "missing") is False


def test_where_torch_cannot_tell_of_avx512_training_stays_with_mkl(monkeypatch):
    monkeypatch.delattr(torch.cpu, "_is_avx512_supported", raising=False)
    monkeypatch.setattr(matmul, "_intel_cpu", lambda: False)
    monkeypatch.delenv("TRANSDUCE_CPU_MATMUL", raising=False)
    assert matmul._chosen_route() == matmul.Route(training=False, decoding=True)


def test_a_torch_without_the_operator_never_takes_the_route(onednn_calls, monkeypatch):
    monkeypatch.setattr(matmul, "_available", False)
    monkeypatch.setenv("TRANSDUCE_CPU_MATMUL", "onednn")
    assert matmul._chosen_route() == matmul.Route(training=False, decoding=False)
    matmul.use_onednn(True)
    assert matmul._enabled == matmul.Route(training=False, decoding=False)
    weight = torch.randn(6, 8, requires_grad=True)
    linear(torch.randn(4, 8), weight).sum().backward()
    with torch.no_grad():
        linear(torch.randn(4, 8), weight)
    assert onednn_calls == []


def test_training_and_decoding_products_follow_their_own_route(onednn_calls):
    weight = torch.randn(6, 8, requires_grad=True)
    matmul.use_onednn(matmul.Route(training=False, decoding=True))  # an AVX2-only AMD CPU
    linear(torch.randn(4, 8), weight).sum().backward()
    assert onednn_calls == []  # MKL forward and backward
    with torch.no_grad():
        linear(torch.randn(4, 8), weight)
    assert onednn_calls == ["plain"]
    old = matmul.use_onednn(matmul.Route(training=True, decoding=False))
    assert old == matmul.Route(training=False, decoding=True)  # what restores it
    linear(torch.randn(4, 8, requires_grad=True), weight).sum().backward()
    with torch.no_grad():
        linear(torch.randn(4, 8), weight)
    assert onednn_calls == ["plain"] * 4  # forward, dL/dx, dL/dW; decoding on MKL
