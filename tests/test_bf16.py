"""Training's products in bfloat16 on a CPU (`train.precision=bf16`, models/bf16.py): the
products (the layers' and the loss's) are those of the rounded inputs, padding rows change
nothing, only training's products take the route, and the Trainer takes it only when asked and
only where the CPU multiplies bfloat16 in hardware."""

import os

import pytest
import torch
import torch.nn.functional as F

from transduce.config import ConfigError, RnnConfig, TransformerConfig
from transduce.data.dataset import PreparedData
from transduce.models import bf16, matmul
from transduce.models.transformer import FeedForward
from transduce.training.loop import Trainer

from .conftest import prepared_reverse_task
from .test_train import toy_config


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    return prepared_reverse_task(tmp_path_factory.mktemp("toy"))


def _rounded(t):
    return t.to(torch.bfloat16).double()


feed_forward = bf16.feed_forward


@pytest.mark.parametrize("rows", [1, 37, bf16.PAD_ROWS, bf16.PAD_ROWS + 5])
def test_the_products_are_those_of_the_rounded_inputs_and_padding_adds_nothing(rows):
    torch.manual_seed(rows)
    x = torch.randn(rows, 48, requires_grad=True)
    weight = torch.randn(24, 48, requires_grad=True)
    bias = torch.randn(24, requires_grad=True)
    grad = torch.randn(rows, 24)
    out = bf16.linear(x, weight, bias)
    out.backward(grad)
    assert out.dtype == x.grad.dtype == weight.grad.dtype == torch.float32
    assert out.shape == (rows, 24) and x.grad.shape == x.shape
    # float32 sums of bfloat16 inputs, the result rounded to bfloat16 (8 bits): 2^-8 of sums
    # of up to ~10, one rounding more near zero, where the bias is added after it
    close = {"rtol": 2**-7, "atol": 0.05}
    torch.testing.assert_close(
        out.double(), _rounded(x) @ _rounded(weight).T + bias.double(), **close
    )
    torch.testing.assert_close(x.grad.double(), _rounded(grad) @ _rounded(weight), **close)
    torch.testing.assert_close(weight.grad.double(), _rounded(grad).T @ _rounded(x), **close)
    torch.testing.assert_close(bias.grad, grad.sum(0))
    # and not float32's own products, which the tolerance above would also accept
    assert not torch.equal(out, F.linear(x, weight, bias))


class _Recorder(torch.nn.Module):
    """Stands for the FFN's dropout: keeps what it was handed, returns it unchanged."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x):
        self.seen.append(x)
        return x


@pytest.mark.parametrize("rows", [1, 37, bf16.PAD_ROWS + 5])
def test_the_feed_forward_keeps_its_hidden_units_in_bfloat16_and_its_padding_adds_nothing(rows):
    torch.manual_seed(rows)
    ffn = FeedForward(48, 96)
    ffn.dropout = _Recorder()
    x = torch.randn(2, rows, 48, requires_grad=True)
    grad = torch.randn(2, rows, 48)
    with bf16.products():
        out = ffn(x)
    out.backward(grad)
    (hidden,) = ffn.dropout.seen  # between the products: bfloat16, the rows padded
    assert hidden.dtype == torch.bfloat16
    assert hidden.shape == (-(-2 * rows // bf16.PAD_ROWS) * bf16.PAD_ROWS, 96)
    assert out.dtype == x.grad.dtype == torch.float32 and out.shape == x.shape
    # the reference: each product of rounded inputs, the hidden units rounded once (b1 rounded
    # and added before), the gradients reaching them rounded as the second product leaves them
    w1, b1, w2 = (_rounded(t) for t in (ffn.w_1.weight, ffn.w_1.bias, ffn.w_2.weight))
    xs, g = _rounded(x.reshape(-1, 48)), _rounded(grad.reshape(-1, 48))
    h = _rounded(xs @ w1.T + b1).relu()
    grad_h = _rounded(g @ w2) * (h > 0)
    close = {"rtol": 2**-7, "atol": 0.05}
    torch.testing.assert_close(out.double().reshape(-1, 48), h @ w2.T + ffn.w_2.bias, **close)
    torch.testing.assert_close(ffn.w_2.weight.grad.double(), g.T @ h, **close)
    torch.testing.assert_close(ffn.w_2.bias.grad, grad.reshape(-1, 48).sum(0))
    torch.testing.assert_close(x.grad.double().reshape(-1, 48), grad_h @ w1, **close)
    torch.testing.assert_close(ffn.w_1.weight.grad.double(), grad_h.T @ xs, **close)
    torch.testing.assert_close(ffn.w_1.bias.grad.double(), grad_h.sum(0), **close)
    assert not torch.equal(out, FeedForward.forward(ffn, x.detach()))  # not float32's


def test_the_feed_forward_drops_the_units_float32_would_and_leaves_the_route_when_not_training(
    monkeypatch,
):
    torch.manual_seed(0)
    ffn = FeedForward(32, 64, relu_dropout=0.5)
    x = torch.randn(3, 50, 32, requires_grad=True)
    torch.manual_seed(7)
    exact = ffn(x)
    taken = []
    monkeypatch.setattr(bf16, "feed_forward", lambda *a: taken.append(a) or feed_forward(*a))
    with bf16.products():
        torch.manual_seed(7)  # the padded mask's first rows are float32's mask: the same draws
        low = ffn(x)
        with torch.no_grad():
            torch.manual_seed(7)
            assert torch.equal(ffn(x), exact)  # validation and decoding: float32
    assert len(taken) == 1
    torch.testing.assert_close(low, exact, rtol=2**-6, atol=0.05)
    torch.manual_seed(8)
    assert (ffn(x) - low).abs().max() > 0.5  # other units dropped: the check above can fail


def test_only_training_products_inside_the_context_take_bfloat16():
    torch.manual_seed(0)
    x, weight = torch.randn(5, 7, 16), torch.randn(8, 16, requires_grad=True)
    # this CPU's float32 products (MKL's or oneDNN's, `matmul.Route`: not always the same bits)
    exact = matmul.linear(x, weight)
    with torch.no_grad():
        exact_decoding = matmul.linear(x, weight)
    with bf16.products():
        assert bf16.active()
        trained = matmul.linear(x, weight)
        with torch.no_grad():  # decoding, validation, the loss's own chunks: float32
            assert torch.equal(matmul.linear(x, weight), exact_decoding)
        wide = x.double(), weight.double()  # float64 (the tests' references): as it is
        assert torch.equal(matmul.linear(*wide), F.linear(*wide))
    assert not bf16.active()
    assert trained.shape == (5, 7, 8) and trained.requires_grad
    torch.testing.assert_close(trained, bf16.linear(x.reshape(35, 16), weight, None).view(5, 7, 8))
    assert not torch.allclose(trained, exact, rtol=1e-4, atol=1e-4)  # rounded, not float32's
    assert torch.equal(matmul.linear(x, weight), exact)


def test_the_context_is_left_on_an_error_and_restores_an_outer_one():
    with pytest.raises(RuntimeError), bf16.products():
        raise RuntimeError("a failed update")
    assert not bf16.active()
    with bf16.products():
        with bf16.products():
            pass
        assert bf16.active()


@pytest.mark.parametrize(
    "model, entries",
    [
        (TransformerConfig(d_model=256), 64),  # `small`: 64 entries worth 1.1-1.2x an update
        (TransformerConfig(d_model=512), 8),  # `base`: 64 held ~1 GB more, at no gain
        (TransformerConfig(d_model=1024), 8),
        (RnnConfig(d_model=1000), 8),
    ],
)
def test_the_product_cache_is_sized_to_the_model_unless_the_user_set_it(
    model, entries, monkeypatch
):
    first, second = bf16.CACHE_SETTINGS
    monkeypatch.setenv(first, "5")
    monkeypatch.setenv(second, "3")
    monkeypatch.setattr(bf16, "USER_SET", frozenset({second}))
    monkeypatch.setattr(bf16, "supported", lambda: True)
    bf16.prepare(model)
    assert os.environ[first] == str(entries) and os.environ[second] == "3"


@pytest.mark.parametrize("width, entries", [(32, "64"), (512, "8")])
def test_the_trainer_sizes_the_product_cache_to_its_model(
    width, entries, toy_data, tmp_path, monkeypatch
):
    monkeypatch.setattr(bf16, "supported", lambda: True)
    monkeypatch.setattr(bf16, "USER_SET", frozenset())
    for name in bf16.CACHE_SETTINGS:  # restored after the test, as `prepare` changes them
        monkeypatch.setenv(name, "5")
    config = toy_config(**{"train.precision": "bf16", "model.d_model": width})
    Trainer(config, PreparedData.load(toy_data), tmp_path, False, torch.device("cpu"))
    assert [os.environ[name] for name in bf16.CACHE_SETTINGS] == [entries, entries]


@pytest.mark.parametrize(
    "amx, avx512_bf16, native", [(False, False, False), (True, False, True), (False, True, True)]
)
def test_bfloat16_is_native_with_amx_or_avx512_bf16(amx, avx512_bf16, native, monkeypatch):
    """A Xeon with AMX and an EPYC of Zen 4 (AVX-512 BF16, no AMX) both take the route; a CPU
    with neither (AVX2, or AVX-512 without BF16) would emulate the products."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    assert bf16.supported() == native
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")  # a torch without the probe
    assert bf16.supported() == amx


def test_the_trainer_refuses_bf16_on_a_cpu_that_would_emulate_it(toy_data, tmp_path, monkeypatch):
    monkeypatch.setattr(bf16, "supported", lambda: False)
    config = toy_config(**{"train.precision": "bf16"})
    with pytest.raises(ConfigError, match="needs bfloat16 products in hardware"):
        Trainer(config, PreparedData.load(toy_data), tmp_path / "run", False, torch.device("cpu"))
    assert not (tmp_path / "run").exists()  # refused before the run folder was made


@pytest.mark.parametrize(
    "precision, model, taken",
    [
        ("auto", TransformerConfig(d_model=256), True),  # `small` and wider, bf16 in hardware
        ("auto", TransformerConfig(d_model=1024), True),
        ("auto", TransformerConfig(d_model=128), True),  # `tiny` and the demo: 1.22x (s49)
        ("auto", TransformerConfig(d_model=64), False),  # narrower: not measured
        ("auto", RnnConfig(d_model=1000), False),  # not measured: the recurrent cells stay
        ("fp32", TransformerConfig(d_model=512), False),
        ("bf16", TransformerConfig(d_model=128), True),
        ("bf16", RnnConfig(d_model=1000), True),
    ],
)
def test_auto_takes_bfloat16_for_a_transformer_as_wide_as_tiny_on_a_bf16_cpu(
    precision, model, taken, monkeypatch
):
    monkeypatch.setattr(bf16, "supported", lambda: True)
    assert bf16.chosen(precision, torch.device("cpu"), model) == taken
    assert not bf16.chosen(precision, torch.device("cuda"), model)  # autocast's, there
    monkeypatch.setattr(bf16, "supported", lambda: False)
    assert bf16.chosen(precision, torch.device("cpu"), model) == (precision == "bf16")  # refused


@pytest.mark.parametrize(
    "precision, width, taken", [("bf16", 32, True), ("auto", 32, False), ("auto", 256, True),
                                ("fp32", 256, False)]
)  # fmt: skip
def test_the_trainer_updates_through_bf16_products_only_when_asked(
    precision, width, taken, toy_data, tmp_path, monkeypatch
):
    calls = []
    products = bf16.linear
    monkeypatch.setattr(bf16, "supported", lambda: True)  # emulated where not in hardware
    for name in bf16.CACHE_SETTINGS:  # restored after the test, as `prepare` changes them
        monkeypatch.setenv(name, os.environ.get(name, "8"))
    monkeypatch.setattr(bf16, "linear", lambda *a: calls.append(a[0].shape) or products(*a))
    projections, projection = [], bf16.Projection
    monkeypatch.setattr(bf16, "Projection", lambda w: projections.append(w) or projection(w))
    ffns = []
    monkeypatch.setattr(bf16, "feed_forward", lambda *a: ffns.append(a) or feed_forward(*a))
    config = toy_config(**{"train.precision": precision, "model.d_model": width})
    trainer = Trainer(config, PreparedData.load(toy_data), tmp_path, False, torch.device("cpu"))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    batch = next(iter(trainer.epochs.batches(0)))
    result = trainer._update([batch], rate=1e-3)
    assert result.tgt_tokens > 0
    moved = [not torch.equal(p, q) for p, q in zip(trainer.model.parameters(), before, strict=True)]
    assert all(moved)  # every parameter, the bf16 layers' weights and biases too, was updated
    assert bool(calls) == taken
    assert len(projections) == taken  # the loss's products too, once an update
    layers = sum(isinstance(m, FeedForward) for m in trainer.model.modules())
    assert len(ffns) == (layers if taken else 0) and layers > 0  # every FFN's hidden in bf16


@pytest.mark.parametrize("rows", [1, 37, bf16.PAD_ROWS + 5])
def test_the_loss_projections_products_are_those_of_the_rounded_inputs(rows):
    torch.manual_seed(rows)
    hidden, weight, grad = torch.randn(rows, 32), torch.randn(300, 32), torch.randn(rows, 300)
    projection = bf16.Projection(weight)
    logits = projection.logits(hidden)
    grad_hidden, grad_weight = projection.gradients(grad, hidden, (True, True))
    assert logits.dtype == grad_hidden.dtype == grad_weight.dtype == torch.float32
    assert (logits.shape, grad_hidden.shape, grad_weight.shape) == (grad.shape, hidden.shape,
                                                                    weight.shape)  # fmt: skip
    close = {"rtol": 2**-7, "atol": 0.05}
    h, w, g = _rounded(hidden), _rounded(weight), _rounded(grad)
    torch.testing.assert_close(logits.double(), h @ w.T, **close)
    torch.testing.assert_close(grad_hidden.double(), g @ w, **close)
    torch.testing.assert_close(grad_weight.double(), g.T @ h, **close)  # padding adds nothing
    assert not torch.equal(logits, hidden @ weight.T)  # not float32's own products
    assert projection.gradients(grad, hidden, (False, True))[0] is None
    assert projection.gradients(grad, hidden, (True, False))[1] is None


def test_the_loss_projects_in_bfloat16_when_training_on_the_route_and_in_float32_otherwise(
    monkeypatch,
):
    """Inside `bf16.products` the training loss's chunks take `bf16.Projection` (its sums and
    gradients within bfloat16's rounding of float32's); validation's sums stay float32, exact."""
    import transduce.training.loss as loss_module

    v, d = 300, 32
    monkeypatch.setattr(loss_module, "CHUNK_LOGITS", 130 * v)  # bf16's chunks: whole 128s
    made, chunks = [], []

    class Projection(bf16.Projection):
        def __init__(self, weight):
            made.append(weight)
            super().__init__(weight)

        def logits(self, hidden):
            chunks.append(hidden.size(0))
            return super().logits(hidden)

    monkeypatch.setattr(bf16, "Projection", Projection)
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(4, 40, d, generator=g, requires_grad=True)
    weight = (0.2 * torch.randn(v, d, generator=g)).requires_grad_()  # logits of a few nats
    target = torch.randint(3, v, (4, 40), generator=g)
    target[0, 30:] = 0  # 150 scored rows
    exact = loss_module.projected_label_smoothed_loss(hidden, weight, target, 0.1, 0)
    expected = torch.autograd.grad(exact.loss, [hidden, weight])
    with bf16.products():
        low = loss_module.projected_label_smoothed_loss(hidden, weight, target, 0.1, 0)
        got = torch.autograd.grad(low.loss, [hidden, weight])
        with torch.no_grad():
            valid = loss_module.projected_label_smoothed_loss(hidden, weight, target, 0.1, 0)
    assert len(made) == 1  # one cast of the weight for the update's chunks, none to validate
    assert chunks == [128, 22]
    assert torch.equal(valid.loss, exact.loss) and torch.equal(valid.nll, exact.nll)
    assert low.loss.item() == pytest.approx(exact.loss.item(), rel=1e-2)
    assert low.loss.item() != exact.loss.item()
    for mine, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0.02 * theirs.abs().max().item())
    assert (got[0][target == 0] == 0).all()  # padding rows get no gradient
