"""Label-smoothed cross entropy (s5.4, Szegedy et al. 2016).

The target distribution is q'(k) = (1 - eps) * [k == y] + eps / V, so the loss per token is
(1 - eps) * -log p(y) + eps / V * sum_k -log p(k). Padding positions are not scored.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from ..models.matmul import linear


@dataclass
class LossSums:
    """Sums over the scored tokens; divide by `n_tokens` for per-token values."""

    loss: Tensor  # label-smoothed, what training minimises
    nll: Tensor  # plain negative log-likelihood, for perplexity
    scored: Tensor | int  # the count of scored tokens; a tensor is read only when asked, so a
    # GPU's queue does not wait on it in the middle of an update

    @property
    def n_tokens(self) -> int:
        return int(self.scored)


def label_smoothed_loss(
    logits: Tensor, target: Tensor, eps: float, pad: int, fused: bool = False
) -> LossSums:
    """logits (..., V), target (...) -> sums over the non-pad targets.

    Half-precision logits are raised to float32: the log-softmax of a large vocabulary needs it.
    `fused`: the sums through torch.compile, a few kernels instead of one pass over the
    (tokens x V) logits per operation (training/compiled.py).
    """
    sums = _compiled_sums() if fused else smoothed_sums
    return LossSums(*sums(logits, target, eps, pad))


def smoothed_sums(
    logits: Tensor, target: Tensor, eps: float, pad: int
) -> tuple[Tensor, Tensor, Tensor]:
    """(summed label-smoothed loss, summed nll, count) over the non-pad targets."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    log_probs = torch.log_softmax(logits, dim=-1)
    scored = target != pad
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (...)
    uniform = -log_probs.mean(dim=-1)  # eps / V * sum_k -log p(k), without eps
    loss = (1.0 - eps) * nll + eps * uniform
    return loss.masked_fill(~scored, 0.0).sum(), nll.masked_fill(~scored, 0.0).sum(), scored.sum()


@functools.cache
def _compiled_sums():
    return torch.compile(smoothed_sums, dynamic=True)


def model_loss(
    network: torch.nn.Module, batch, eps: float, pad: int, fused: bool = False
) -> LossSums:
    """The loss sums of `network` (a model, or its DistributedDataParallel wrapper) on `batch`,
    teacher-forced. A model with an `output_weight` (the Transformer) hands over its last states
    and the loss projects them (in chunks on a CPU, `projected_label_smoothed_loss`); others give
    logits.
    `fused`: half-precision logits take the compiled sums (`label_smoothed_loss`)."""
    model = getattr(network, "module", network)
    weight = getattr(model, "output_weight", None)
    if weight is None:
        logits = network(batch.src, batch.tgt_in)
        return label_smoothed_loss(logits, batch.tgt_out, eps, pad, fused)
    hidden = network(batch.src, batch.tgt_in, project=False)  # through DDP's forward, if any
    return projected_label_smoothed_loss(hidden, weight, batch.tgt_out, eps, pad, fused)


# Rows of the pre-softmax projection taken at a time by `projected_label_smoothed_loss`: about
# 2^22 logits (16 MiB in float32) per chunk, whatever the vocabulary: with the softmax written
# over the logits, training `tiny` peaked 0.2 GB lower than with two buffers of 2^23. Smaller
# chunks read the (V x d) matrix more often: 2^21 made the loss 9% slower (benchmarks/MEMORY.md).
CHUNK_LOGITS = 1 << 22


def projected_label_smoothed_loss(
    hidden: Tensor, weight: Tensor, target: Tensor, eps: float, pad: int, fused: bool = False
) -> LossSums:
    """`label_smoothed_loss(hidden @ weight^T, ...)` without the (tokens x V) logits in memory.

    hidden (..., d), weight (V, d): the decoder's last states and the pre-softmax projection
    (the shared embedding, s3.4). For 4,096 target tokens and V = 10,000 the logits, their
    log-softmax and their gradients are each 164 MB, and together they were most of a training
    step's peak memory (benchmarks/MEMORY.md). Here the rows are projected a chunk at a time, and
    while a chunk's logits exist the gradient they give is taken at once: d loss / d logits =
    softmax - q' (q' the smoothed target of s5.4), so dL/dhidden = (p - q') W and dL/dW = (p -
    q')^T hidden are summed chunk by chunk and the logits are dropped. The same products as the
    plain path, in chunks of one size whatever the batch, so the allocator reuses its blocks.

    Float32 on the CPU only. A GPU takes the plain path, `fused` or not: chunks sized for a CPU's
    caches were a few hundred kernel launches an update there, and at the paper's vocabulary of
    37,000 they took 66 ms of `base`'s 210 ms update (benchmarks/SPEED.md, GPU); so do
    half-precision `hidden`s.
    """
    on_cpu = hidden.device.type == "cpu"
    if not on_cpu or hidden.dtype != torch.float32 or weight.dtype != torch.float32:
        return label_smoothed_loss(linear(hidden, weight), target, eps, pad, fused)
    flat, flat_target = hidden.reshape(-1, hidden.size(-1)), target.reshape(-1)
    n_tokens = int((flat_target != pad).sum())
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        loss, nll = _ProjectedLoss.apply(flat, weight, flat_target, eps, pad)
    else:  # validation: the sums alone
        loss, nll, _, _ = _chunked(flat, weight, flat_target, eps, pad, (False, False))
    return LossSums(loss=loss, nll=nll, scored=n_tokens)


def _chunked(
    hidden: Tensor, weight: Tensor, target: Tensor, eps: float, pad: int, wanted: tuple
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """The summed loss and nll of hidden (N, d) @ weight^T, chunk by chunk, and the loss's
    gradients for hidden and weight where `wanted`.

    Padding rows are dropped before the projection: they are not scored and get no gradient.
    Each chunk takes one softmax and reads the log-probabilities it needs from the normaliser,
    lse = log sum_k exp(x_k) = max_k x_k - log max_k p(k) (the largest probability is
    exp(max - lse), never below 1/V, so its log is accurate to rounding): -log p(y) = lse - x_y,
    and the uniform part's mean -log p(k) = lse - mean_k x_k. A log-softmax followed by the exp the
    gradient needs took longer on the CPU (benchmarks/SPEED.md, session 10).
    """
    scored = (target != pad).nonzero().squeeze(1)
    kept_hidden, kept_target = hidden.index_select(0, scored), target.index_select(0, scored)
    grad_kept = torch.empty_like(kept_hidden) if wanted[0] else None
    grad_weight = torch.zeros_like(weight) if wanted[1] else None
    loss, nll_sum = hidden.new_zeros(()), hidden.new_zeros(())
    vocab_size = weight.size(0)
    rows = max(1, CHUNK_LOGITS // vocab_size)
    for start in range(0, kept_hidden.size(0), rows):
        h, y = kept_hidden[start : start + rows], kept_target[start : start + rows].unsqueeze(-1)
        logits = linear(h, weight)  # (r, V)
        top, mean, at_target = logits.amax(-1, True), logits.mean(-1, True), logits.gather(-1, y)
        # written over the logits (torch.softmax takes no out=; its kernel reads a row whole
        # before writing it, and the tests compare against the plain log_softmax path)
        probs = torch._softmax(logits, -1, False, out=logits)
        del logits
        log_largest = probs.amax(-1, True).log_()  # (r, 1); lse = top - log_largest
        # differences of logits first, then the log: as accurate as log_softmax's x - max - log S
        nll = (top - at_target) - log_largest
        loss += ((1.0 - eps) * nll + eps * ((top - mean) - log_largest)).sum()
        nll_sum += nll.sum()
        if any(wanted):
            # p - q': the softmax, less eps / V everywhere and (1 - eps) more at the target
            grad = probs.sub_(eps / vocab_size)
            grad.scatter_add_(-1, y, grad.new_full(y.shape, eps - 1.0))
            if grad_kept is not None:
                grad_kept[start : start + rows] = linear(grad, weight.t())  # (r, d)
            if grad_weight is not None:
                grad_weight += linear(h.t(), grad.t()).t()  # (d, V) -> (V, d)
            del grad
        # freed before the next chunk's logits are made: one (r, V) buffer at any time
        del probs
    grad_hidden = None
    if grad_kept is not None:
        grad_hidden = torch.zeros_like(hidden).index_copy_(0, scored, grad_kept)
    return loss, nll_sum, grad_hidden, grad_weight


class _ProjectedLoss(torch.autograd.Function):
    """(summed smoothed loss, summed nll) of hidden @ weight^T; the gradients are found in the
    forward pass (see `projected_label_smoothed_loss`) and scaled in the backward."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, target: Tensor, eps: float, pad: int):
        loss, nll, ctx.grad_hidden, ctx.grad_weight = _chunked(
            hidden, weight, target, eps, pad, ctx.needs_input_grad[:2]
        )
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        grad_hidden, grad_weight = ctx.grad_hidden, ctx.grad_weight
        ctx.grad_hidden = ctx.grad_weight = None  # once: their memory goes with this call
        return (
            None if grad_hidden is None else grad_hidden.mul_(grad_loss),
            None if grad_weight is None else grad_weight.mul_(grad_loss),
            None,
            None,
            None,
        )
