"""The oneDNN route for float32 CPU products: same values and gradients as torch, taken when it
should be and only then."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import tiny_model
from transduce import matmul
from transduce.matmul import Linear, as_torch_linears, linear

pytestmark = pytest.mark.skipif(not matmul._available, reason="this torch has no oneDNN")


@pytest.fixture
def onednn_calls(monkeypatch):
    """Count the products that went through oneDNN, with the route switched on."""
    calls = []
    real = matmul._onednn

    def counting(x, weight, bias):
        calls.append("packed" if weight.is_mkldnn else "plain")
        return real(x, weight, bias)

    monkeypatch.setattr(matmul, "_onednn", counting)
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


def test_inference_builds_no_graph(onednn_calls):
    layer = Linear(8, 6)
    with torch.no_grad():
        y = layer(torch.randn(4, 8))
    assert y.grad_fn is None and len(onednn_calls) == 1


def test_only_float32_cpu_outside_autocast_takes_the_route(onednn_calls):
    weight = torch.randn(6, 8, dtype=torch.float64)
    linear(torch.randn(4, 8, dtype=torch.float64), weight)  # the float64 tests' reference path
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = linear(torch.randn(4, 8), weight.float())
    assert y.dtype == torch.bfloat16  # autocast still applies: torch's own linear ran
    linear(torch.randn(0, 8), weight.float())  # no rows
    assert onednn_calls == []
    matmul.use_onednn(False)
    linear(torch.randn(4, 8), weight.float())
    assert onednn_calls == []


def test_a_model_decodes_the_same_either_way():
    model = tiny_model(dtype=torch.float32)
    src, tgt = torch.tensor([[4, 5, 6, 7, 3]]), torch.tensor([[2, 8, 9, 10]])
    old = matmul.use_onednn(True)
    try:
        with torch.no_grad():
            fast = model(src, tgt)
            matmul.use_onednn(False)
            reference = model(src, tgt)
    finally:
        matmul.use_onednn(old)
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-5)


def test_as_torch_linears_shares_parameters_and_outputs():
    model = tiny_model(dtype=torch.float32)
    n_linear = sum(type(m) is Linear for m in model.modules())
    src, tgt = torch.tensor([[4, 5, 6, 7, 3]]), torch.tensor([[2, 8, 9, 10]])
    with torch.no_grad():
        before = model(src, tgt)
        parameters = {id(p) for p in model.parameters()}
        as_torch_linears(model)
        after = model(src, tgt)
    assert n_linear > 0 and not any(type(m) is Linear for m in model.modules())
    assert sum(type(m) is torch.nn.Linear for m in model.modules()) == n_linear
    assert {id(p) for p in model.parameters()} == parameters
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)


def test_packed_weights_give_the_same_products_and_never_go_stale(onednn_calls):
    layer = Linear(8, 6)
    x = torch.randn(5, 8)
    with torch.no_grad():
        plain = layer(x)
        with matmul.packed_for_inference(layer):
            assert len(matmul._packed) == 1
            packed = layer(x)
            layer.weight.add_(1.0)  # an optimizer step inside: the packed copy is stale
            changed = layer(x)
        assert matmul._packed == {}  # dropped on exit
    assert onednn_calls == ["plain", "packed", "plain"]
    torch.testing.assert_close(packed, plain, rtol=0, atol=0)
    torch.testing.assert_close(changed, plain + x.sum(1, keepdim=True), rtol=1e-5, atol=1e-5)
