import pytest
import torch
import torch.nn.functional as F

from transduce.training.loss import label_smoothed_loss

PAD = 0


def _batch(seed=0, v=7):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 4, v, generator=g, dtype=torch.float64)
    target = torch.tensor([[3, 5, 6, PAD], [2, 4, PAD, PAD]])
    return logits, target


def test_label_smoothing_is_the_cross_entropy_against_the_smoothed_distribution():
    logits, target = _batch()
    eps, v = 0.1, logits.size(-1)
    smoothed = torch.full(logits.shape, eps / v, dtype=torch.float64)
    smoothed.scatter_add_(
        -1, target[..., None], torch.full((2, 4, 1), 1 - eps, dtype=torch.float64)
    )
    per_token = -(smoothed * torch.log_softmax(logits, -1)).sum(-1)
    expected = per_token[target != PAD].sum()
    sums = label_smoothed_loss(logits, target, eps, PAD)
    assert sums.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert sums.n_tokens == 5


def test_without_smoothing_it_is_the_negative_log_likelihood():
    logits, target = _batch(1)
    sums = label_smoothed_loss(logits, target, 0.0, PAD)
    nll = F.cross_entropy(logits.view(-1, 7), target.view(-1), ignore_index=PAD, reduction="sum")
    assert sums.loss.item() == pytest.approx(nll.item(), rel=1e-6)
    assert sums.nll.item() == pytest.approx(nll.item(), rel=1e-6)


def test_padding_positions_do_not_count():
    logits, target = _batch(2)
    changed = logits.clone()
    changed[target == PAD] = 100.0
    a = label_smoothed_loss(logits, target, 0.1, PAD)
    b = label_smoothed_loss(changed, target, 0.1, PAD)
    assert a.loss.item() == pytest.approx(b.loss.item())


def test_gradcheck():
    logits, target = _batch(3)
    logits.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x: label_smoothed_loss(x, target, 0.1, PAD).loss, (logits,)
    )
