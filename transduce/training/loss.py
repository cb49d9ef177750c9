"""Label-smoothed cross entropy (s5.4, Szegedy et al. 2016).

The target distribution is q'(k) = (1 - eps) * [k == y] + eps / V, so the loss per token is
(1 - eps) * -log p(y) + eps / V * sum_k -log p(k). Padding positions are not scored.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from ..models import bf16
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
    scored = target != pad
    loss, nll = smoothed_per_position(log_probs_of(logits), target, eps)
    return loss.masked_fill(~scored, 0.0).sum(), nll.masked_fill(~scored, 0.0).sum(), scored.sum()


def log_probs_of(logits: Tensor) -> Tensor:
    """log_softmax over the vocabulary, half-precision logits raised to float32 first: the
    log-softmax of a large vocabulary needs it."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return torch.log_softmax(logits, dim=-1)


def smoothed_per_position(log_probs: Tensor, target: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(label-smoothed loss, nll) at every position: log_probs (..., V), target (...)."""
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (...)
    uniform = -log_probs.mean(dim=-1)  # eps / V * sum_k -log p(k), without eps
    return (1.0 - eps) * nll + eps * uniform, nll


@functools.cache
def _compiled_sums():
    return torch.compile(smoothed_sums, dynamic=True)


# The devices on which training attends over a batch without source padding without a mask
# (`Batch.src_padded`; `data.one_source_length` makes nearly every batch so). GPUs: on an H200,
# with the memory-efficient kernel for unmasked attention (`models.attention.GPU_KERNELS_TRAINING`),
# `big`'s update 1.04x and `base`'s 1.16x the masked one's speed (SPEED.md, session 34). Not the
# CPU: there the update was 0.99x (session 29).
MASK_FREE_DEVICES: set[str] = {"cuda"}


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
    # Through DDP's forward, if any. A batch without source padding may attend without a mask
    src_padded = batch.src_padded or batch.src.device.type not in MASK_FREE_DEVICES
    hidden = network(batch.src, batch.tgt_in, project=False, src_padded=src_padded)
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

    Float32 on the CPU, training's products in bfloat16 on the route of `models/bf16.py`. A GPU
    (or half-precision `hidden`) training through the compiled code (`fused`) takes
    `_chunked_compiled`: chunks of `COMPILED_CHUNK_LOGITS`, padding rows kept, each chunk's sums
    and gradient one compiled function. Otherwise the plain path: chunks sized for a CPU's caches
    were a few hundred kernel launches an update on a GPU, and at the paper's vocabulary of
    37,000 they took 66 ms of `base`'s 210 ms update (benchmarks/SPEED.md, GPU).
    """
    on_cpu = hidden.device.type == "cpu"
    training = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    flat, flat_target = hidden.reshape(-1, hidden.size(-1)), target.reshape(-1)
    if not on_cpu or hidden.dtype != torch.float32 or weight.dtype != torch.float32:
        if not (fused and training):
            return label_smoothed_loss(linear(hidden, weight), target, eps, pad, fused)
        loss, nll = _ProjectedLoss.apply(flat, weight, flat_target, eps, pad, _chunked_compiled)
        # a count on the GPU, read only when asked: the host never waits on it mid-update
        return LossSums(loss=loss, nll=nll, scored=(flat_target != pad).sum())
    n_tokens = int((flat_target != pad).sum())
    if training:
        loss, nll = _ProjectedLoss.apply(flat, weight, flat_target, eps, pad, _chunked)
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
    low = any(wanted) and bf16.active()
    projection = output_projection(weight, training=any(wanted))
    vocab_size = weight.size(0)
    rows = chunk_rows(vocab_size, low)
    for start in range(0, kept_hidden.size(0), rows):
        h, y = kept_hidden[start : start + rows], kept_target[start : start + rows].unsqueeze(-1)
        logits = projection.logits(h)  # (r, V)
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
            grad_h, grad_w = projection.gradients(grad, h, wanted)  # (r, d), (V, d)
            if grad_kept is not None:
                grad_kept[start : start + rows] = grad_h
            if grad_weight is not None:
                grad_weight += grad_w
            del grad, grad_h, grad_w
        # freed before the next chunk's logits are made: one (r, V) buffer at any time
        del probs
    grad_hidden = None
    if grad_kept is not None:
        grad_hidden = torch.zeros_like(hidden).index_copy_(0, scored, grad_kept)
    return loss, nll_sum, grad_hidden, grad_weight


def chunk_rows(vocab_size: int, low: bool, passes: int = 1) -> int:
    """Rows of each of `passes` passes that a chunk of the projection takes: ~CHUNK_LOGITS
    logits in all, and on the bfloat16 route (`low`) whole PAD_ROWS in all, so that only the
    last chunk is padded for bfloat16's products."""
    rows = max(1, CHUNK_LOGITS // vocab_size)
    if low:
        rows = max(bf16.PAD_ROWS, rows - rows % bf16.PAD_ROWS)
    return max(1, rows // passes)


def output_projection(weight: Tensor, training: bool) -> bf16.Projection | _Float32Projection:
    """The three products of a chunked loss with the output weight (the logits, and the
    gradients for the states and the weight): training's in bfloat16 where the Trainer takes that
    route (`models/bf16.py`), validation's in float32."""
    return bf16.Projection(weight) if training and bf16.active() else _Float32Projection(weight)


class _Float32Projection:
    """`bf16.Projection`'s three products in float32 (through `matmul.linear`)."""

    def __init__(self, weight: Tensor) -> None:
        self.weight = weight

    def logits(self, hidden: Tensor) -> Tensor:
        return linear(hidden, self.weight)

    def gradients(self, grad: Tensor, hidden: Tensor, wanted: tuple) -> tuple:
        grad_hidden = linear(grad, self.weight.t()) if wanted[0] else None
        grad_weight = linear(hidden.t(), grad.t()).t() if wanted[1] else None  # (d, V) -> (V, d)
        return grad_hidden, grad_weight


# Logits projected at a time by `_chunked_compiled`: 2^27 (256 MiB in bfloat16, ~3,600 rows at
# 37,000 words), so that the products stay large and an update of 25,000 tokens takes ~7 chunks.
COMPILED_CHUNK_LOGITS = 1 << 27


def _chunked_compiled(
    hidden: Tensor, weight: Tensor, target: Tensor, eps: float, pad: int, wanted: tuple
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """`_chunked` for a GPU: no row is dropped (finding the padding rows would make the host wait
    for the GPU), and each chunk's sums and gradient are one compiled function, one pass to
    reduce the logits and one to write p - q' in their precision. The logits and their gradient
    exist a chunk at a time, never for the whole batch (1.7 GB each for 25,000 tokens at 37,000
    words in bfloat16), and the plain path's separate passes of the forward and the backward over
    them are gone. Products in the autocast precision, where autocast is on."""
    device = hidden.device.type
    low = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
    low_weight = weight.to(low)
    grad_hidden = torch.empty_like(hidden) if wanted[0] else None
    grad_weight = torch.zeros_like(weight) if wanted[1] else None
    loss, nll = hidden.new_zeros((), dtype=torch.float32), hidden.new_zeros((), dtype=torch.float32)
    sums = _compiled_chunk_sums()
    rows = max(1, COMPILED_CHUNK_LOGITS // weight.size(0))
    for start in range(0, hidden.size(0), rows):
        h = hidden[start : start + rows].to(low)
        chunk_loss, chunk_nll, grad = sums(
            h @ low_weight.t(), target[start : start + rows], eps, pad
        )
        loss, nll = loss + chunk_loss, nll + chunk_nll
        if grad_hidden is not None:
            grad_hidden[start : start + rows] = grad @ low_weight
        if grad_weight is not None:
            grad_weight += grad.t() @ h  # (V, d)
    return loss, nll, grad_hidden, grad_weight


def chunk_sums_and_gradient(
    logits: Tensor, target: Tensor, eps: float, pad: int
) -> tuple[Tensor, Tensor, Tensor]:
    """(summed loss, summed nll, d loss / d logits) of logits (r, V), target (r,): the sums as
    `smoothed_sums`, read from the normaliser lse (-log p(y) = lse - x_y), and the gradient
    p - q' (zero on padding rows) in the logits' precision."""
    x = logits.float()
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    scored = (target != pad).unsqueeze(-1)
    nll = lse - x.gather(-1, target.unsqueeze(-1))
    loss = (1.0 - eps) * nll + eps * (lse - x.mean(dim=-1, keepdim=True))
    vocab_size = x.size(-1)
    words = torch.arange(vocab_size, device=x.device)
    smoothed = torch.where(
        words == target.unsqueeze(-1), 1.0 - eps + eps / vocab_size, eps / vocab_size
    )
    grad = (torch.exp(x - lse) - smoothed).masked_fill(~scored, 0.0)
    return (
        loss.masked_fill(~scored, 0.0).sum(),
        nll.masked_fill(~scored, 0.0).sum(),
        grad.to(logits.dtype),
    )


@functools.cache
def _compiled_chunk_sums():
    return torch.compile(chunk_sums_and_gradient, dynamic=True)


class _ProjectedLoss(torch.autograd.Function):
    """(summed smoothed loss, summed nll) of hidden @ weight^T; the gradients are found in the
    forward pass by `chunks` (`_chunked` or `_chunked_compiled`) and scaled in the backward."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, target: Tensor, eps: float, pad: int, chunks):
        loss, nll, ctx.grad_hidden, ctx.grad_weight = chunks(
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
            None,
        )
