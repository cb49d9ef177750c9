"""Masks and multi-head scaled dot-product attention (s3.2).

Masks are bool with True = may attend, the convention of torch's `scaled_dot_product_attention`.
The fused kernel is the fast path; `attention_reference` is the explicit formula and the only path
that returns the attention weights (for the figures of s3.2 and the appendix).
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .derived import state_of
from .dropout import dropout as dropped
from .matmul import Linear, linear

# The fused kernels a GPU may take. Not cuDNN's, PyTorch's first choice on Hopper GPUs: it builds
# an execution plan for every new shape of its inputs, ~6 ms a call on an H200 against ~0.1 ms
# for a shape seen before, and token-bucketed batches bring new shapes at nearly every update
# (WMT-like lengths: `big` 247 ms an update on new shapes, 130 ms on seen ones; SPEED.md, GPU).
GPU_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
# Training's attention may not take flash. Without a mask and over every key, flash cost 1.1-1.9x
# the memory-efficient kernel's time a call (bf16, forward and backward, h = 8 and 16; SPEED.md,
# session 31). In the decoder's causal self-attention at WMT's lengths flash took 2.2 ms a layer
# of `big` (forward and backward; 0.8 ms a non-causal call on the other kernel), and the update
# was 1.035x as fast without it (H200, the same machine; SPEED.md, session 43). A masked
# call could not take flash anyway. Decoding keeps it (not measured there). `sdpa_kernel` reads
# the lists as sets.
GPU_KERNELS_TRAINING = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


# The longest span (queries or keys) that CPU training attends to with the explicit formula.
EXPLICIT_TRAINING_SPAN = 32

# The devices on which training projects queries, keys and values of one input with one product
# of the stacked weights (`MultiHeadAttention._stacks_in_training`). Not the CPU: there the update
# was 0.97x (`tiny`) and 0.99x (`small`) the speed of one product per layer (SPEED.md, s28).
STACKED_TRAINING_DEVICES = {"cuda"}


def _plain(layers: tuple[nn.Module, ...]) -> bool:
    """Whether each layer's product is exactly `linear` of its weight and bias: stacking is only
    ours to do then (not for torch.ao's quantized Linear, an adapter, a layer without bias)."""
    return all(type(layer) is Linear and layer.bias is not None for layer in layers)


def fused_kernels(device: torch.device, training: bool = False) -> AbstractContextManager:
    """Where `scaled_dot_product_attention` on `device` may choose from: on a GPU `GPU_KERNELS`,
    or `GPU_KERNELS_TRAINING` for a call in training. Entered in the code that calls it, so that
    a compiled graph holds the choice too."""
    if device.type != "cuda":
        return nullcontext()
    return sdpa_kernel(GPU_KERNELS_TRAINING if training else GPU_KERNELS)


def padding_mask(tokens: Tensor, pad: int) -> Tensor:
    """(B, T) True where a token is real, False at padding."""
    return tokens != pad


def causal_mask(n_queries: int, n_keys: int, device: torch.device | None = None) -> Tensor:
    """(n_queries, n_keys) True where query i may see key j: j <= i + (n_keys - n_queries).

    With a cache the queries are the last `n_queries` positions of `n_keys`, hence the offset.
    """
    offset = n_keys - n_queries
    query = torch.arange(n_queries, device=device)[:, None]
    key = torch.arange(n_keys, device=device)[None, :]
    return key <= query + offset


def attention_reference(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float = 0.0
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V, written out (eq. 1). Returns (output, weights).

    q: (B, h, Tq, d_k), k: (B, h, Tk, d_k), v: (B, h, Tk, d_v), mask broadcast to (B, h, Tq, Tk).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if dropout > 0.0:
        weights = dropped(weights, dropout)
    return weights @ v, weights


def sentence_queries(q: Tensor, n_sentences: int) -> Tensor:
    """Queries q (N, h, Tq, d) whose g = N / B consecutive rows (a sentence's beams) share one
    sentence's keys -> (B, h, g * Tq, d): the beams as extra queries of their sentence, so that
    the keys and values are never copied per beam. A view where g is 1."""
    n_rows, n_heads, n_queries, width = q.shape
    group = n_rows // n_sentences
    if group == 1:
        return q
    q = q.reshape(n_sentences, group, n_heads, n_queries, width).transpose(1, 2)
    return q.reshape(n_sentences, n_heads, group * n_queries, width)


def row_outputs(out: Tensor, n_rows: int, n_queries: int) -> Tensor:
    """`sentence_queries` undone on what attention made of them: (B, h, g * Tq, .) ->
    (N, h, Tq, .)."""
    n_sentences, n_heads = out.shape[:2]
    group = n_rows // n_sentences
    if group == 1:
        return out
    out = out.reshape(n_sentences, n_heads, group, n_queries, -1).transpose(1, 2)
    return out.reshape(n_rows, n_heads, n_queries, -1)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O with head_i = Attention(QW^Q_i, ...).

    d_k and d_v are set apart from d_model / h, as Table 3 rows A and B need.
    """

    def __init__(self, d_model: int, h: int, d_k: int, d_v: int, dropout: float = 0.0):
        super().__init__()
        self.h, self.d_k, self.d_v = h, d_k, d_v
        self.dropout = dropout
        self.w_q = Linear(d_model, h * d_k)
        self.w_k = Linear(d_model, h * d_k)
        self.w_v = Linear(d_model, h * d_v)
        self.w_o = Linear(h * d_v, d_model)
        self._stacked: tuple[tuple, Tensor, Tensor] | None = None  # `_stacked_qkv`

    def _heads(self, x: Tensor) -> Tensor:
        """(N, T, h * d) -> (N, h, T, d), a view."""
        n_rows, length, _ = x.shape
        return x.view(n_rows, length, self.h, -1).transpose(1, 2)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of x (B, T, d_model): (B, h, T, d_k) and (B, h, T, d_v).

        In training one product with the two weights stacked (`_stacks_in_training`)."""
        layers = (self.w_k, self.w_v)
        if not self._stacks_in_training(layers, x.device):
            return self._heads(self.w_k(x)), self._heads(self.w_v(x))
        k, v = self._stacked_product(x, layers, [self.h * self.d_k, self.h * self.d_v])
        return k, v

    def project_q(self, x: Tensor) -> Tensor:
        """Queries of x (N, T, d_model): (N, h, T, d_k)."""
        return self._heads(self.w_q(x))

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values of x (N, T, d_model), for self-attention.

        The three are one product with the weights stacked. Without gradients (decoding) the
        stacked weights are kept while they are unchanged: at beam search's 4-256 rows one
        product of three times the width is 1.1-1.7x faster than three (benchmarks/SPEED.md).
        Training on a GPU stacks them anew each call, autograd taking the gradient apart
        (`_stacks_in_training`); CPU training, and a layer swapped for another kind, keep each
        layer's own product.
        """
        layers = (self.w_q, self.w_k, self.w_v)
        widths = [self.h * self.d_k, self.h * self.d_k, self.h * self.d_v]
        if self._stacks_in_training(layers, x.device):
            q, k, v = self._stacked_product(x, layers, widths)
            return q, k, v
        if torch.is_grad_enabled() or not _plain(layers):
            return self.project_q(x), *self.project_kv(x)
        q, k, v = self._heads_of_product(x, *self._stacked_qkv(), widths)
        return q, k, v

    @staticmethod
    def _stacks_in_training(layers: tuple[Linear, ...], device: torch.device) -> bool:
        """Whether projections of one input are one product of the stacked weights, gradients
        flowing back through the stacking: in training on `STACKED_TRAINING_DEVICES`. One
        product of 2-3x the width instead of 2-3, and the input's gradient one product rather
        than a sum of 2-3: fewer kernels for a GPU's update (SPEED.md, session 28)."""
        on = device.type in STACKED_TRAINING_DEVICES
        return on and torch.is_grad_enabled() and _plain(layers)

    def _stacked_product(
        self, x: Tensor, layers: tuple[Linear, ...], widths: list[int]
    ) -> list[Tensor]:
        weight = torch.cat([layer.weight for layer in layers])
        bias = torch.cat([layer.bias for layer in layers])
        return self._heads_of_product(x, weight, bias, widths)

    def _heads_of_product(
        self, x: Tensor, weight: Tensor, bias: Tensor, widths: list[int]
    ) -> list[Tensor]:
        """One product with stacked weights, split by `widths` into (N, h, T, .) views."""
        return [self._heads(part) for part in linear(x, weight, bias).split(widths, dim=-1)]

    def _stacked_qkv(self) -> tuple[Tensor, Tensor]:
        layers = (self.w_q, self.w_k, self.w_v)
        state = tuple(state_of(t) for layer in layers for t in (layer.weight, layer.bias))
        if self._stacked is None or self._stacked[0] != state:
            # Made as a normal tensor even under `torch.inference_mode`: `matmul` prepacks only
            # weights with a version counter, and an inference tensor has none (read unpacked,
            # the stacked product at batch 1 took 176 us a call against 120 us packed).
            with torch.inference_mode(False):
                weight = torch.cat([layer.weight for layer in layers])
                bias = torch.cat([layer.bias for layer in layers])
            self._stacked = (state, weight, bias)
        return self._stacked[1], self._stacked[2]

    def forward(
        self, x: Tensor, k: Tensor, v: Tensor, *options, **named
    ) -> tuple[Tensor, Tensor | None]:
        """`attend` from queries x (N, Tq, d_model), projected here, over projected k, v
        (B, h, Tk, .); mask, is_causal and need_weights as there."""
        return self.attend(self.project_q(x), k, v, *options, **named)

    def self_attend(
        self, x: Tensor, mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """The encoder's self-attention of x (B, T, d_model) under `mask`: `attend` over x's own
        queries, keys and values. In training one product of the stacked weights where
        `_stacks_in_training`; otherwise this module's call with each layer's own product, as
        forward hooks on them (`transduce explain`'s test) expect."""
        if self._stacks_in_training((self.w_q, self.w_k, self.w_v), x.device):
            return self.attend(*self.project_qkv(x), mask, False, need_weights)
        return self(x, *self.project_kv(x), mask, False, need_weights)

    def _explicit_is_faster(self, n_queries: int, n_keys: int, device: torch.device) -> bool:
        """Whether the explicit formula beats the fused kernel on a CPU (GPUs keep the kernel).
        Step-by-step decoding (one new position per row): 1.5x (self-) and 2.5x (cross-attention)
        faster. Training over short spans (most of Multi30k's batches): forward and backward
        together 1.1-3.7x faster up to `EXPLICIT_TRAINING_SPAN` positions, slower from 48-96 on,
        the update 1.03-1.09x faster (benchmarks/SPEED.md, session 27)."""
        if device.type != "cpu":
            return False
        if not self.training:
            return n_queries == 1
        return torch.is_grad_enabled() and max(n_queries, n_keys) <= EXPLICIT_TRAINING_SPAN

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from projected queries q (N, h, Tq, d_k) over k, v (B, h, Tk, .).

        When N is a multiple g of B (beam search), each group of g consecutive rows shares one
        sentence's keys and values: the g rows are attended as extra queries of that sentence, so
        the encoder output is never copied per beam. Returns (N, Tq, d_model) and, on request,
        the weights (N, h, Tq, Tk).
        """
        n_rows, _, n_queries, _ = q.shape
        q = sentence_queries(q, k.size(0))
        dropout = self.dropout if self.training else 0.0
        if need_weights or self._explicit_is_faster(n_queries, k.size(2), q.device):
            if is_causal:
                mask = causal_mask(q.size(2), k.size(2), q.device)
            out, weights = attention_reference(q, k, v, mask, dropout)
            weights = weights if need_weights else None
        else:
            with fused_kernels(q.device, self.training):
                out = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal
                )
            weights = None
        out = row_outputs(out, n_rows, n_queries)
        weights = None if weights is None else row_outputs(weights, n_rows, n_queries)
        out = out.transpose(1, 2).reshape(n_rows, n_queries, self.h * self.d_v)  # (N, Tq, h*d_v)
        return self.w_o(out), weights
