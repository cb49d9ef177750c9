"""The recurrent baseline's attention: four score functions and the context vector.

Luong et al. 2015 (s3.1, eq. 8): score(h'_j, h_i) = h'_j^T h_i (dot), h'_j^T W_a h_i (general),
v_a^T tanh(W_a [h'_j; h_i]) (concat). Bahdanau et al. 2015 (eq. 6, A.1.2): a(s_{j-1}, h_i) =
v_a^T tanh(W_a s_{j-1} + U_a h_i) (additive), the same form as concat, asked with the previous
decoder state; models/rnn.py does that wiring. Then alpha_ij = softmax_i(score) over the real
source positions and c_j = sum_i alpha_ij h_i.

Each score splits into the part of the source, `keys(memory)`, computed once per sentence when
decoding starts, and the product with the queries, so beams never copy the source. Queries come
in groups: the `Q` queries of one sentence (its beams, or its target positions in training) are
scored together against that sentence's keys.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .matmul import Linear


class Dot(nn.Module):
    """score(h'_j, h_i) = h'_j^T h_i; needs h_i and h'_j of one size."""

    def keys(self, memory: Tensor) -> Tensor:
        return memory  # (B, S, d_model)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        """query (B, Q, d_model), keys (B, S, d_k) -> scores (B, Q, S)."""
        return query @ keys.transpose(1, 2)


class General(Dot):
    """score(h'_j, h_i) = h'_j^T W_a h_i: W_a h_i is the key, computed once per sentence."""

    def __init__(self, d_model: int, d_memory: int):
        super().__init__()
        self.W_a = Linear(d_memory, d_model, bias=False)

    def keys(self, memory: Tensor) -> Tensor:
        return self.W_a(memory)  # (B, S, d_model)


class Additive(nn.Module):
    """score(s, h_i) = v_a^T tanh(W_a s + U_a h_i) (Bahdanau et al. 2015, eq. 6 and A.1.2)."""

    def __init__(self, d_model: int, d_memory: int):
        super().__init__()
        self.W_a = Linear(d_model, d_model, bias=False)
        self.U_a = Linear(d_memory, d_model, bias=False)
        self.v_a = Linear(d_model, 1, bias=False)

    def keys(self, memory: Tensor) -> Tensor:
        return self.U_a(memory)  # (B, S, d_a)

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        """query (B, Q, d_model), keys (B, S, d_a) -> scores (B, Q, S)."""
        hidden = torch.tanh(self.W_a(query)[:, :, None, :] + keys[:, None, :, :])  # (B, Q, S, d_a)
        return self.v_a(hidden).squeeze(-1)


class Concat(Additive):
    """score(h'_j, h_i) = v_a^T tanh(W_a [h'_j; h_i]) (Luong et al. 2015, eq. 8).

    W_a is held as its two column blocks, W_a [h'_j; h_i] = W_a h'_j + U_a h_i, so the source's
    block is applied once per sentence: the function is Bahdanau's, asked with the current state.
    """


SCORES = {"dot": Dot, "general": General, "concat": Concat, "additive": Additive}


def make_score(name: str, d_model: int, d_memory: int) -> nn.Module:
    """The score function `model.score`: queries of d_model entries, keys from h_i of d_memory."""
    return Dot() if name == "dot" else SCORES[name](d_model, d_memory)


class GlobalAttention(nn.Module):
    """alpha_ij = softmax_i(score(h'_j, h_i)) over the real source positions; c_j (Luong s3.1)."""

    def __init__(self, score: str, d_model: int, d_memory: int):
        super().__init__()
        self.score = make_score(score, d_model, d_memory)

    def keys(self, memory: Tensor) -> Tensor:
        """The source's part of the score, once per sentence: memory (B, S, d_memory)."""
        return self.score.keys(memory)

    def forward(
        self, query: Tensor, keys: Tensor, memory: Tensor, src_pad_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """query (N, T, d_model), the rows of B sentences in N / B consecutive groups; keys,
        memory and src_pad_mask (B, S) once per sentence -> c (N, T, d_memory), alpha (N, T, S)."""
        n, t, _ = query.shape
        b, s = src_pad_mask.shape
        grouped = query.reshape(b, (n // b) * t, -1)  # (B, group * T, d_model)
        scores = self.score(grouped, keys).masked_fill(~src_pad_mask[:, None, :], float("-inf"))
        alpha = torch.softmax(scores, dim=-1)  # (B, group * T, S); exactly 0 on padding
        context = alpha @ memory  # (B, group * T, d_memory)
        return context.reshape(n, t, -1), alpha.reshape(n, t, s)
