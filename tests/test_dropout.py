"""Dropout with the CPU's cheaper mask (models/dropout.py): the rate, the scaling, the
gradient, the seed, and no position favoured by how the 64-bit draws are cut up."""

import pytest
import torch
import torch.nn.functional as F

from transduce.models.dropout import LEVELS, Dropout, dropout, keep_mask

N = 400_000


def drop_mask(shape: torch.Size, levels_dropped: int) -> torch.Tensor:
    """True where dropped."""
    return keep_mask(shape, levels_dropped) == 0


def rounded(p: float) -> float:
    """The rate the mask draws with: p to the nearest 1/65,536."""
    return round(p * LEVELS) / LEVELS


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_each_element_is_dropped_with_probability_p_whatever_its_position(p):
    """The share dropped is p within 5 standard deviations, also for each position modulo 4
    (each 64-bit draw makes four elements' integers: a lane without its sign bit would never
    drop, or always), and neighbours are dropped independently."""
    torch.manual_seed(0)
    dropped = drop_mask(torch.Size([N]), round(p * LEVELS)).float()
    tolerance = 5 * (p * (1 - p) / (N / 4)) ** 0.5
    assert dropped.mean().item() == pytest.approx(p, abs=tolerance / 2)
    for lane in range(4):
        assert dropped[lane::4].mean().item() == pytest.approx(p, abs=tolerance)
    both = (dropped[:-1] * dropped[1:]).mean().item()
    assert both == pytest.approx(p * p, abs=tolerance)


def test_survivors_are_scaled_by_one_over_one_minus_the_rate_drawn_and_the_mean_is_kept():
    torch.manual_seed(1)
    x = torch.rand(N, dtype=torch.float64) + 0.5
    y = dropout(x, 0.3)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - rounded(0.3)), rtol=1e-12, atol=0)
    assert y.mean().item() == pytest.approx(x.mean().item(), rel=0.01)


@pytest.mark.parametrize("p", [0.99999, 0.999995, 0.9999999])
def test_a_rate_next_to_one_drops_nearly_everything_and_never_blows_up(p):
    """round(p * 65,536) may reach 65,536 (taken by torch's own dropout) or stop just short:
    either way nearly every element is dropped and survivors are scaled by at most 65,536."""
    torch.manual_seed(6)
    y = dropout(torch.ones(100_000), p)
    assert (y == 0).float().mean().item() > 0.999
    assert y.max().item() <= 1 / (1 - p) + 1 and y.max().item() <= LEVELS


def test_each_level_of_the_rate_drops_one_value_of_the_65536():
    """The mask's threshold counts exactly `levels_dropped` of the 16-bit values: none at 0, one
    at 1 (an error of one value is invisible at p = 0.1, but doubles the rate here)."""
    torch.manual_seed(7)
    shape = torch.Size([1 << 22])  # 64 draws of each 16-bit value on average
    assert not drop_mask(shape, 0).any()
    assert 32 < drop_mask(shape, 1).sum().item() < 100  # expected 64; two values: 128


def test_the_residual_sum_adds_the_same_dropout_in_one_op_with_the_gradients_of_the_sum():
    """`Dropout(p)(x, r)`, the residual connection's, is r + dropout(x) under the same seed;
    its gradient to r is the incoming one, to x the kept elements' scaled alike; a second
    derivative works."""
    r = torch.randn(4, 30, 16, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, 30, 16, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(8)
    fused = Dropout(0.3)(x, r)
    torch.manual_seed(8)
    apart = r + dropout(x, 0.3)
    torch.testing.assert_close(fused, apart, rtol=0, atol=0)
    weights = torch.randn_like(x)
    grad_r, grad_x = torch.autograd.grad((fused * weights).sum(), (r, x))
    kept = (apart - r != 0).double()
    torch.testing.assert_close(grad_r, weights, rtol=0, atol=0)
    torch.testing.assert_close(grad_x, weights * kept / (1 - rounded(0.3)))
    assert 0.25 < 1 - kept.mean().item() < 0.35
    (first,) = torch.autograd.grad(Dropout(0.3)(x, r).pow(2).sum(), x, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), r)  # d/dr of 2 (r + m s x) m s
    assert second.abs().sum() > 0
    module = Dropout(0.3).eval()
    assert torch.equal(module(x, r), r + x) and torch.equal(Dropout(0.0)(x, r), r + x)


def test_a_rate_that_rounds_to_zero_leaves_the_input_as_it_is():
    x = torch.randn(1000)
    assert dropout(x, 1e-6) is x


def test_the_gradient_passes_where_the_element_was_kept_scaled_alike():
    torch.manual_seed(2)
    x = torch.randn(3, 50, 8, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 50, 8, dtype=torch.float64)
    y = dropout(x, 0.4)
    (grad,) = torch.autograd.grad((y * weights).sum(), x)
    kept = (y != 0).double()
    torch.testing.assert_close(grad, weights * kept / (1 - rounded(0.4)))
    # a second derivative, as nn.Dropout allows (e.g. a gradient penalty): dropout is linear
    y = dropout(x, 0.4)
    (first,) = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)  # 2 m s^2 x
    (second,) = torch.autograd.grad(first.sum(), x)
    scale = 1 / (1 - rounded(0.4))
    torch.testing.assert_close(second, 2 * (y != 0).double() * scale**2)


def test_the_same_seed_draws_the_same_mask_and_another_seed_another():
    x = torch.ones(1000)
    torch.manual_seed(3)
    first = dropout(x, 0.5)
    torch.manual_seed(3)
    again = dropout(x, 0.5)
    torch.manual_seed(4)
    other = dropout(x, 0.5)
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_off_in_evaluation_and_at_p_zero_all_dropped_at_p_one():
    x = torch.randn(10, 7)
    module = Dropout(0.3).eval()
    assert module(x) is x and dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        Dropout(1.5)
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        dropout(x, -0.1)


def test_it_matches_torch_dropout_in_distribution_on_a_non_contiguous_input():
    torch.manual_seed(5)
    x = torch.ones(200, 300).t()  # a transposed view
    ours, theirs = dropout(x, 0.2), F.dropout(x, 0.2)
    assert ours.shape == theirs.shape == x.shape
    assert (ours == 0).float().mean().item() == pytest.approx(0.2, abs=0.01)
    assert set(theirs.unique().tolist()) == {0.0, 1.25}
    assert ours.unique().tolist() == [0.0, pytest.approx(1 / (1 - rounded(0.2)))]


def test_late_dropout_turns_every_rate_of_a_recurrent_model_off_and_back_and_says_when():
    """The LSTM's own rate between its layers too (a float `dropout`, not a module); `before`
    says True at the one update where dropout begins, and nothing changes with 0 updates."""
    from transduce.models.dropout import LateDropout

    from .conftest import tiny_rnn

    model = tiny_rnn(dropout=0.2)
    rates = lambda: sorted(  # noqa: E731
        (name, getattr(m, attr)) for name, m in model.named_modules() for attr in ("p", "dropout")
        if isinstance(getattr(m, attr, None), float)
    )  # fmt: skip
    configured = rates()
    assert {name for name, _ in configured} >= {"encoder.rnn", "decoder.rnn"}
    assert {rate for _, rate in configured} == {0.2}
    late = LateDropout(model, updates_without=2)
    assert [late.before(u) for u in (1, 2)] == [False, False]
    assert {rate for _, rate in rates()} == {0.0}
    assert [late.before(u) for u in (3, 4)] == [True, False]
    assert rates() == configured
    resumed = LateDropout(model, updates_without=2)
    assert not resumed.before(5) and rates() == configured  # a resumed run: already on
    assert not LateDropout(model, updates_without=0).before(1) and rates() == configured
    without = LateDropout(tiny_rnn(dropout=0.0), updates_without=2)  # nothing to begin
    assert [without.before(u) for u in (1, 2, 3)] == [False, False, False]
