"""R-Drop (Liang et al. 2021): every batch through the model twice, under two independent
dropout masks, and the two predictions pulled together.

Per target token, with p1 and p2 the two passes' next-token distributions and L_ls s5.4's
label-smoothed loss, the update minimises

    (L_ls(p1) + L_ls(p2)) / 2  +  alpha / 2 * (KL(p1 || p2) + KL(p2 || p1)) / 2

which is the paper's eq. 3 halved, so that `alpha` is the paper's (5 for its IWSLT runs) and the
loss stays on the scale of an ordinary update's. Each update then costs more than two (2.3 at
`tiny` on a 2-core AVX2 CPU: the loss's own work grows too). Dropout is
what makes the passes differ: without it the KL term is zero and this is the ordinary loss,
twice over.

The two passes go as one batch of twice the rows (each row's masks drawn independently). For a
model with an output weight (the Transformer) the loss projects both passes' states a chunk at a
time and finds its gradients in the same pass, as `loss.projected_label_smoothed_loss` does for
one: with d = log p1 - log p2, the gradient for pass 1's logits is

    (p1 - q') / 2  +  alpha / 4 * (p1 * (d - KL(p1 || p2)) + p1 - p2)

and pass 2's the same with the passes swapped (q' s5.4's smoothed target). Through autograd over
whole logits instead, `tiny` trained at 1,093 target tokens/s and peaked at 8.2 GB, against
1,720-1,764 and 1.5 GB this way (the ordinary update: 4,041-4,068 and 0.93-0.95 GB;
benchmarks/SPEED.md, session 55).
Other families go through autograd over their logits (`rdrop_sums`). Written for the CPU: on a
GPU it runs, without the compiled chunks of the ordinary loss.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from ..config import ConfigError, TrainConfig
from ..models import bf16
from ..models.dropout import LateDropout
from .loss import (
    MASK_FREE_DEVICES,
    LossSums,
    chunk_rows,
    log_probs_of,
    output_projection,
    smoothed_per_position,
)

logger = logging.getLogger(__name__)


class RDropUpdates:
    """Which updates train with R-Drop: from `train.rdrop_after` + 1 on, and none while late
    dropout holds the model's dropout off (`train.late_dropout`): without dropout the two passes
    are one pass twice, no KL to learn from at twice the cost. Like late dropout, it follows the
    update's number alone, so a resumed run begins it where an unbroken one does.

    A new run whose model has no dropout at all is refused; a resumed one (its settings cannot
    change) trains on with the ordinary loss, which is what R-Drop without dropout computes."""

    def __init__(self, train: TrainConfig, dropout: LateDropout, resumed: bool = False) -> None:
        self.rdrop = train.rdrop
        if self.rdrop > 0 and not dropout.sites:
            message = "train.rdrop needs dropout, and the model has none (every rate 0)"
            if not resumed:
                raise ConfigError(
                    f"{message}: both passes would be the same; set model.dropout, or train.rdrop=0"
                )
            logger.warning("%s: training on with the ordinary loss, which it equals", message)
            self.rdrop = 0.0
        self.after = max(train.rdrop_after, train.late_dropout)
        # the setting that decides where it begins, for its log line
        self.why = (
            "train.rdrop_after" if train.rdrop_after >= train.late_dropout else "train.late_dropout"
        )

    def alpha(self, update: int) -> float:
        """R-Drop's alpha at `update` (a run's first is 1): 0 before it begins."""
        if not self.rdrop or update <= self.after:
            return 0.0
        if update == self.after + 1 and self.after:
            logger.info("update %d: R-Drop begins (%s)", update, self.why)
        return self.rdrop


def rdrop_loss(network: torch.nn.Module, batch, eps: float, pad: int, alpha: float) -> LossSums:
    """The loss sums of `network` (a model or its DDP wrapper) on `batch`, passed twice."""
    src, tgt_in = batch.src.repeat(2, 1), batch.tgt_in.repeat(2, 1)
    model = getattr(network, "module", network)
    weight = getattr(model, "output_weight", None)
    if weight is None:
        first, second = network(src, tgt_in).chunk(2)
        return rdrop_sums(first, second, batch.tgt_out, eps, pad, alpha)
    src_padded = batch.src_padded or src.device.type not in MASK_FREE_DEVICES
    hidden = network(src, tgt_in, project=False, src_padded=src_padded)
    first, second = (h.reshape(-1, h.size(-1)) for h in hidden.chunk(2))
    target = batch.tgt_out.reshape(-1)
    loss, nll = _ProjectedRDrop.apply(first, second, weight, target, eps, pad, alpha)
    return LossSums(loss=loss, nll=nll, scored=int((target != pad).sum()))


def rdrop_sums(
    first: Tensor, second: Tensor, target: Tensor, eps: float, pad: int, alpha: float
) -> LossSums:
    """Sums over the non-pad targets of the objective above (`loss`) and of the two passes'
    mean negative log-likelihood (`nll`); logits (..., V), target (...)."""
    scored = target != pad
    log_p1, log_p2 = log_probs_of(first), log_probs_of(second)
    (smoothed_1, nll_1), (smoothed_2, nll_2) = (
        smoothed_per_position(log_p, target, eps) for log_p in (log_p1, log_p2)
    )
    # (KL(p1||p2) + KL(p2||p1)) / 2 = sum_k (p1 - p2)(log p1 - log p2) / 2
    symmetric_kl = ((log_p1.exp() - log_p2.exp()) * (log_p1 - log_p2)).sum(-1) / 2
    loss = (smoothed_1 + smoothed_2) / 2 + alpha / 2 * symmetric_kl
    nll = (nll_1 + nll_2) / 2
    return LossSums(
        loss=loss.masked_fill(~scored, 0.0).sum(),
        nll=nll.masked_fill(~scored, 0.0).sum(),
        scored=scored.sum(),
    )


class _ProjectedRDrop(torch.autograd.Function):
    """(summed objective, summed mean nll) of both passes' states (N, d) projected by the weight
    (V, d); the gradients are found in the forward pass (`_chunked`), scaled in the backward."""

    @staticmethod
    def forward(ctx, first, second, weight, target, eps: float, pad: int, alpha: float):
        loss, nll, *ctx.grads = _chunked(first, second, weight, target, eps, pad, alpha)
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        grads, ctx.grads = ctx.grads, []  # once: their memory goes with this call
        return (*(g.mul_(grad_loss) for g in grads), None, None, None, None)


def _chunked(first, second, weight, target, eps: float, pad: int, alpha: float):
    """The sums and the gradients for both passes' states and the weight, padding rows dropped,
    a chunk of rows of both passes projected together."""
    scored = (target != pad).nonzero().squeeze(1)
    kept = [first.index_select(0, scored), second.index_select(0, scored)]
    kept_target = target.index_select(0, scored)
    grad_kept = [torch.empty_like(kept[0]), torch.empty_like(kept[1])]
    grad_weight = torch.zeros_like(weight)
    loss, nll = first.new_zeros(()), first.new_zeros(())
    projection = output_projection(weight, training=True)
    rows = chunk_rows(weight.size(0), bf16.active(), passes=2)
    for start in range(0, kept_target.size(0), rows):
        end = min(start + rows, kept_target.size(0))
        h = torch.cat([kept[0][start:end], kept[1][start:end]])  # (2r, d)
        log_p = torch.log_softmax(projection.logits(h), -1)
        chunk_loss, chunk_nll, grad = _chunk_sums_and_gradient(
            log_p, kept_target[start:end].unsqueeze(-1), eps, alpha
        )
        loss, nll = loss + chunk_loss, nll + chunk_nll
        grad_h, grad_w = projection.gradients(grad, h, (True, True))
        grad_kept[0][start:end], grad_kept[1][start:end] = grad_h.chunk(2)
        grad_weight += grad_w
        del log_p, grad, grad_h, grad_w  # one chunk's (2r, V) buffers at any time
    grads = [torch.zeros_like(first).index_copy_(0, scored, g) for g in grad_kept]
    return loss, nll, *grads, grad_weight


def _chunk_sums_and_gradient(log_p: Tensor, y: Tensor, eps: float, alpha: float):
    """One chunk: log_p (2r, V), pass 1's rows then pass 2's, y (r, 1) -> (summed objective,
    summed mean nll, the gradient for the (2r, V) logits). `log_p` is overwritten."""
    vocab_size = log_p.size(-1)
    log_p1, log_p2 = log_p.chunk(2)
    nll = -(log_p1.gather(-1, y) + log_p2.gather(-1, y)) / 2  # (r, 1)
    uniform = -log_p.mean(-1, keepdim=True).view(2, -1, 1).sum(0) / 2
    d = log_p1 - log_p2
    p = log_p.exp_()  # written over the log-probabilities: one (2r, V) buffer less
    p1, p2 = p.chunk(2)
    kl_12, kl_21 = (p1 * d).sum(-1, keepdim=True), -(p2 * d).sum(-1, keepdim=True)
    loss = ((1.0 - eps) * nll + eps * uniform + alpha / 4 * (kl_12 + kl_21)).sum()
    # The gradients, as the module's doc derives them, in place (a = alpha / 4): pass 1's
    # p1 (a (d - KL12 + 1) + 1/2) - a p2, pass 2's with the passes swapped (d -> -d), less
    # eps / V / 2 everywhere and (1 - eps) / 2 at the target.
    a = alpha / 4
    grad = torch.empty_like(p)
    grad_1, grad_2 = grad.chunk(2)
    torch.sub(d, kl_12, out=grad_1).mul_(a).add_(a + 0.5).mul_(p1).sub_(p2, alpha=a)
    torch.add(d, kl_21, out=grad_2).mul_(-a).add_(a + 0.5).mul_(p2).sub_(p1, alpha=a)
    grad.sub_(eps / vocab_size / 2)
    grad.view(2, -1, vocab_size).scatter_add_(
        -1, y.expand(2, -1, 1), grad.new_full((2, y.size(0), 1), (eps - 1.0) / 2)
    )
    return loss, nll.sum(), grad
