"""R-Drop (Liang et al. 2021): every batch through the model twice, under two independent
dropout masks, and the two predictions pulled together.

Per target token, with p1 and p2 the two passes' next-token distributions and L_ls s5.4's
label-smoothed loss, the update minimises

    (L_ls(p1) + L_ls(p2)) / 2  +  alpha / 2 * (KL(p1 || p2) + KL(p2 || p1)) / 2

which is the paper's eq. 3 halved, so that `alpha` is the paper's (5 for its IWSLT runs) and the
loss stays on the scale of an ordinary update's. Each update then costs about two. Dropout is
what makes the passes differ: without it the KL term is zero and this is the ordinary loss,
twice over.

The two passes go as one batch of twice the rows (each row's masks drawn independently), and the
logits are made whole: not the chunked projection of `loss.py`, so an update holds about twice
the (tokens x V) logits in memory.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..models.matmul import linear
from .loss import MASK_FREE_DEVICES, LossSums


def rdrop_loss(network: torch.nn.Module, batch, eps: float, pad: int, alpha: float) -> LossSums:
    """The loss sums of `network` (a model or its DDP wrapper) on `batch`, passed twice."""
    src, tgt_in = batch.src.repeat(2, 1), batch.tgt_in.repeat(2, 1)
    model = getattr(network, "module", network)
    weight = getattr(model, "output_weight", None)
    if weight is None:
        logits = network(src, tgt_in)
    else:
        src_padded = batch.src_padded or src.device.type not in MASK_FREE_DEVICES
        logits = linear(network(src, tgt_in, project=False, src_padded=src_padded), weight)
    first, second = logits.chunk(2)
    return rdrop_sums(first, second, batch.tgt_out, eps, pad, alpha)


def rdrop_sums(
    first: Tensor, second: Tensor, target: Tensor, eps: float, pad: int, alpha: float
) -> LossSums:
    """Sums over the non-pad targets of the objective above (`loss`) and of the two passes'
    mean negative log-likelihood (`nll`); logits (..., V), target (...)."""
    scored = target != pad
    log_p1, log_p2 = _log_probs(first), _log_probs(second)
    smoothed = (_smoothed(log_p1, target, eps) + _smoothed(log_p2, target, eps)) / 2
    # (KL(p1||p2) + KL(p2||p1)) / 2 = sum_k (p1 - p2)(log p1 - log p2) / 2
    symmetric_kl = ((log_p1.exp() - log_p2.exp()) * (log_p1 - log_p2)).sum(-1) / 2
    loss = smoothed + alpha / 2 * symmetric_kl
    nll = (_nll(log_p1, target) + _nll(log_p2, target)) / 2
    return LossSums(
        loss=loss.masked_fill(~scored, 0.0).sum(),
        nll=nll.masked_fill(~scored, 0.0).sum(),
        scored=scored.sum(),
    )


def _log_probs(logits: Tensor) -> Tensor:
    """In float32 at least: half-precision logits are raised, as `loss.smoothed_sums` does."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return torch.log_softmax(logits, dim=-1)


def _nll(log_probs: Tensor, target: Tensor) -> Tensor:
    return -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)


def _smoothed(log_probs: Tensor, target: Tensor, eps: float) -> Tensor:
    """s5.4: (1 - eps) * -log p(y) + eps / V * sum_k -log p(k), per position."""
    return (1.0 - eps) * _nll(log_probs, target) - eps * log_probs.mean(-1)
