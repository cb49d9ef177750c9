"""A second model family for the contract tests: no network, scripted logits.

`ScriptedSeq2Seq` implements `models.contract.Seq2Seq` the simplest way there is: the logits of a
position are a fixed random function of the sentence's real source tokens and of the whole target
prefix. Its cache holds one source summary per sentence and the prefix of each row, and `reorder`
must select, widen and drop them as beam search asks, or its outputs change.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from transduce.models.contract import AttentionMaps, Encoded


@dataclass
class ScriptedCache:
    summary: Tensor  # (B, d) one per sentence
    src_pad_mask: Tensor  # (B, S)
    state: Tensor  # (N, d) a running function of each row's prefix
    group: int
    length: int = 0

    def reorder(self, index: Tensor, group: int | None = None) -> None:
        group = self.group if group is None else group
        sentences = index.view(-1, group)[:, 0] // self.group
        self.summary = self.summary.index_select(0, sentences)
        self.src_pad_mask = self.src_pad_mask.index_select(0, sentences)
        self.state = self.state.index_select(0, index)
        self.group = group


class ScriptedSeq2Seq:
    """logits(x, y_<t) = O tanh(summary(x) + sum_j R^(t-j) E[y_j]), float64."""

    def __init__(self, vocab_size: int = 12, d: int = 8, pad: int = 0, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.pad, self.vocab_size = pad, vocab_size
        self.src_embed = torch.randn(vocab_size, d, generator=generator, dtype=torch.float64)
        self.tgt_embed = torch.randn(vocab_size, d, generator=generator, dtype=torch.float64)
        self.recurrence = torch.randn(d, d, generator=generator, dtype=torch.float64) / d**0.5
        self.output = torch.randn(d, vocab_size, generator=generator, dtype=torch.float64) * 2

    @property
    def max_positions(self) -> int | None:
        return None

    def eval(self) -> ScriptedSeq2Seq:
        return self

    def __call__(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.forward(src, tgt_in)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        cache = self.init_cache(self.encode(src))
        return torch.stack(
            [self.step(tgt_in[:, t : t + 1], cache) for t in range(tgt_in.size(1))], 1
        )

    def encode(self, src: Tensor) -> Encoded:
        mask = src != self.pad
        memory = self.src_embed[src] * mask[..., None]  # (B, S, d), zero at padding
        return Encoded(memory, mask)

    def init_cache(self, encoded: Encoded, group: int = 1) -> ScriptedCache:
        summary = encoded.memory.sum(dim=1) / encoded.src_pad_mask.sum(dim=1, keepdim=True)
        rows = encoded.memory.size(0) * group
        state = torch.zeros(rows, summary.size(1), dtype=summary.dtype)
        return ScriptedCache(summary, encoded.src_pad_mask, state, group)

    def step(self, tokens: Tensor, cache: ScriptedCache) -> Tensor:
        cache.state = cache.state @ self.recurrence + self.tgt_embed[tokens[:, 0]]
        cache.length += 1
        summary = cache.summary.repeat_interleave(cache.group, dim=0)  # (N, d)
        return torch.tanh(summary + cache.state) @ self.output

    def attention_maps(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, AttentionMaps]:
        """Uniform attention over the real source positions, for every target position."""
        mask = (src != self.pad).to(torch.float64)
        weights = mask / mask.sum(dim=1, keepdim=True)  # (B, S)
        cross = weights[:, None, None, :].expand(-1, 1, tgt_in.size(1), -1)
        return self.forward(src, tgt_in), AttentionMaps(decoder_cross=[cross])
