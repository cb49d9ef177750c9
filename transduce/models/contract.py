"""The model contract: what training, search, translation, export, attention views and serving
may ask of a sequence-to-sequence model, whatever its family.

A family (the Transformer of s3; the recurrent encoder-decoder next) implements `Seq2Seq`, and its
decoder state implements `Cache`. Nothing outside `models/__init__.py` asks which family it holds.

Shapes: B sentences, S source and T target positions, V the vocabulary, N decoder rows (N = B *
group during beam search: `group` consecutive rows, the beams, belong to one sentence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from torch import Tensor


@dataclass
class Encoded:
    """The encoder's output: what the decoder attends to, and where the source is real."""

    memory: Tensor  # (B, S, d): one vector per source position
    src_pad_mask: Tensor  # (B, S) bool, True at real tokens


@dataclass
class AttentionMaps:
    """The attention weights of one teacher-forced pass, one (B, heads, Tq, Tk) tensor per layer.

    `decoder_cross` (target positions over source positions) is there for every family; the
    self-attention lists are empty for a family without self-attention. Each row of each map is a
    distribution over the keys it may see: it sums to one and is zero on padding.
    """

    decoder_cross: list[Tensor]
    encoder_self: list[Tensor] = field(default_factory=list)
    decoder_self: list[Tensor] = field(default_factory=list)


@runtime_checkable
class Cache(Protocol):
    """The decoder's state between steps of incremental decoding."""

    def reorder(self, index: Tensor, group: int | None = None) -> None:
        """Keep rows `index` (N',) in that order: beam selection, widening (the same row taken
        several times) and dropping finished sentences. The rows of one sentence stay together,
        `group` of them from now on (None: as many as before)."""


@runtime_checkable
class Seq2Seq(Protocol):
    """An encoder-decoder that maps source tokens to next-target-token logits.

    `pad` is the padding id; `max_positions` the longest sequence the model can take (None: no
    limit, as with sinusoidal positions).
    """

    pad: int

    @property
    def max_positions(self) -> int | None: ...

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: src (B, S), tgt_in (B, T) -> logits (B, T, V)."""
        ...

    def encode(self, src: Tensor) -> Encoded:
        """src (B, S) -> the encoder's output, once per sentence."""
        ...

    def init_cache(self, encoded: Encoded, group: int = 1) -> Cache:
        """The decoder's state before its first step, with `group` rows per sentence."""
        ...

    def step(self, tokens: Tensor, cache: Cache) -> Tensor:
        """The next position: tokens (N, 1), each row's last output -> logits (N, V).

        Advances `cache` by one position. Equal to `forward` at that position (cached decoding
        equals the full pass)."""
        ...

    def attention_maps(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, AttentionMaps]:
        """`forward` through the path that returns every attention weight; same logits."""
        ...
