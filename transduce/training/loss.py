"""Label-smoothed cross entropy (s5.4, Szegedy et al. 2016).

The target distribution is q'(k) = (1 - eps) * [k == y] + eps / V, so the loss per token is
(1 - eps) * -log p(y) + eps / V * sum_k -log p(k). Padding positions are not scored.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class LossSums:
    """Sums over the scored tokens; divide by `n_tokens` for per-token values."""

    loss: Tensor  # label-smoothed, what training minimises
    nll: Tensor  # plain negative log-likelihood, for perplexity
    n_tokens: int


def label_smoothed_loss(logits: Tensor, target: Tensor, eps: float, pad: int) -> LossSums:
    """logits (..., V), target (...) -> sums over the non-pad targets.

    Half-precision logits are raised to float32: the log-softmax of a large vocabulary needs it.
    """
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    log_probs = torch.log_softmax(logits, dim=-1)
    scored = target != pad
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (...)
    uniform = -log_probs.mean(dim=-1)  # eps / V * sum_k -log p(k), without eps
    loss = (1.0 - eps) * nll + eps * uniform
    return LossSums(
        loss=loss.masked_fill(~scored, 0.0).sum(),
        nll=nll.masked_fill(~scored, 0.0).sum(),
        n_tokens=int(scored.sum()),
    )
