"""The decoder's state during incremental decoding: keys and values per layer (s3.2.3, s6.1).

Self-attention keys and values grow by one position per step; cross-attention keys and values
are computed once per sentence and shared by that sentence's beams. Beam search selects rows
only through `reorder`, so layers never see beams. `kept_sentences` is the bookkeeping every
family's cache shares: which sentences a reorder keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor


def kept_sentences(index: Tensor, group: int, old_group: int, n_sentences: int) -> Tensor | None:
    """The sentence of each new group of `group` rows, from the rows `index` (N',) a reorder keeps
    out of groups of `old_group`; None when they are the `n_sentences` sentences as they were."""
    sentences = index.view(-1, group)[:, 0] // old_group
    same = sentences.numel() == n_sentences and bool(
        (sentences == torch.arange(n_sentences, device=index.device)).all()
    )
    return None if same else sentences


@dataclass
class LayerCache:
    """One decoder layer's keys and values.

    Beam search reorders the self-attention keys and values after every step, and the step
    after adds one position. The reorder copies them into a buffer with room for that one
    position, which the step then writes in place: a concatenation would copy every position
    a second time. Where no reorder made room (greedy search), a step concatenates.
    """

    cross_k: Tensor  # (B, h, S, d_k): one row per sentence
    cross_v: Tensor  # (B, h, S, d_v)
    keys: Tensor | None = None  # (N, h, room, d_k): one row per hypothesis, `length` filled
    values: Tensor | None = None  # (N, h, room, d_v)
    length: int = 0

    @property
    def self_k(self) -> Tensor | None:
        """(N, h, t, d_k): the keys of the t positions so far."""
        return None if self.keys is None else self.keys[:, :, : self.length]

    @property
    def self_v(self) -> Tensor | None:
        return None if self.values is None else self.values[:, :, : self.length]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new positions' keys and values; return all of them."""
        end = self.length + k.size(2)
        if self.keys is None:
            self.keys, self.values = k, v
        elif end <= self.keys.size(2):  # the room a reorder left
            self.keys[:, :, self.length : end] = k
            self.values[:, :, self.length : end] = v
        else:
            self.keys = torch.cat([self.self_k, k], dim=2)
            self.values = torch.cat([self.self_v, v], dim=2)
        self.length = end
        return self.self_k, self.self_v

    def reorder(self, index: Tensor) -> None:
        """Keep hypotheses `index`, in buffers with room for the next position."""
        if self.keys is not None:
            self.keys = self._selected(self.keys, index)
            self.values = self._selected(self.values, index)

    def _selected(self, buffer: Tensor, index: Tensor) -> Tensor:
        n_heads, width = buffer.size(1), buffer.size(3)
        kept = buffer.new_empty(index.numel(), n_heads, self.length + 1, width)
        filled = buffer[:, :, : self.length]
        if filled.requires_grad and torch.is_grad_enabled():  # `out=` has no derivative
            kept[:, :, : self.length] = filled.index_select(0, index)
        else:
            torch.index_select(filled, 0, index, out=kept[:, :, : self.length])
        return kept


@dataclass
class DecoderCache:
    """Per-layer keys and values, the source padding mask, and how many positions are done.

    Rows are hypotheses; `group` consecutive rows belong to one sentence (the beam).
    """

    layers: list[LayerCache]
    src_pad_mask: Tensor  # (B, S), one row per sentence
    group: int = 1
    length: int = field(default=0)  # target positions already decoded
    # The search's `step_plan.StepPlan`, made at its first step; False where the modules decode.
    plan: Any = field(default=None, repr=False)

    def reorder(self, index: Tensor, group: int | None = None) -> None:
        """Keep rows `index` (N',), in that order: beam selection and dropping finished sentences.

        The rows of one sentence stay together, `group` of them from now on (default: as many as
        before; beam search widens from 1 to k after its first step).
        """
        group = self.group if group is None else group
        sentences = kept_sentences(index, group, self.group, self.src_pad_mask.size(0))
        for layer in self.layers:
            layer.reorder(index)
            if sentences is not None:
                layer.cross_k = layer.cross_k.index_select(0, sentences)
                layer.cross_v = layer.cross_v.index_select(0, sentences)
        if sentences is not None:
            self.src_pad_mask = self.src_pad_mask.index_select(0, sentences)
        self.group = group
