"""Dropout with the CPU's cheaper mask (models/dropout.py): the rate, the scaling, the
gradient, the seed, and no position favoured by how the 64-bit draws are cut up."""

import pytest
import torch
import torch.nn.functional as F

from transduce.models.dropout import Dropout, drop_mask, dropout

N = 400_000


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_each_element_is_dropped_with_probability_p_whatever_its_position(p):
    """The share dropped is p within 5 standard deviations, also for each position modulo 4
    (each 64-bit draw makes four elements' integers: a lane without its sign bit would never
    drop, or always), and neighbours are dropped independently."""
    torch.manual_seed(0)
    dropped = drop_mask(torch.Size([N]), p).float()
    tolerance = 5 * (p * (1 - p) / (N / 4)) ** 0.5
    assert dropped.mean().item() == pytest.approx(p, abs=tolerance / 2)
    for lane in range(4):
        assert dropped[lane::4].mean().item() == pytest.approx(p, abs=tolerance)
    both = (dropped[:-1] * dropped[1:]).mean().item()
    assert both == pytest.approx(p * p, abs=tolerance)


def test_survivors_are_scaled_by_one_over_one_minus_p_and_the_mean_is_kept():
    torch.manual_seed(1)
    x = torch.rand(N) + 0.5
    y = dropout(x, 0.3)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / 0.7)
    assert y.mean().item() == pytest.approx(x.mean().item(), rel=0.01)


def test_the_gradient_passes_where_the_element_was_kept_scaled_alike():
    torch.manual_seed(2)
    x = torch.randn(3, 50, 8, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 50, 8, dtype=torch.float64)
    y = dropout(x, 0.4)
    (grad,) = torch.autograd.grad((y * weights).sum(), x)
    kept = (y != 0).double()
    torch.testing.assert_close(grad, weights * kept / 0.6)


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
    assert set(ours.unique().tolist()) == set(theirs.unique().tolist()) == {0.0, 1.25}
