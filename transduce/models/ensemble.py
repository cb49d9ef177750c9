"""Several trained models decoding as one: an ensemble is a `Seq2Seq` whose next-token
distribution is the mean of its members' (Table 2 of the paper compares against ensembles; the
Transformer itself gains from one as they do).

Members may be of different families and sizes: the ensemble talks to each only through the
contract, each with its own encoder output and decoder cache, so beam search, the length limit and
the task's post-processing need nothing new. What they must share is the vocabulary: the ids mean
the same to every member (`load_ensemble` checks it, and the task).

The ensemble's "logits" are the log of the mean probability, already normalised: the search's
log_softmax leaves them as they are. An ensemble of one hands on its member's logits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from .contract import AttentionMaps, Cache, Encoded, Seq2Seq
from .saved import SavedModel, load_model


@dataclass
class EnsembleEncoded:
    """Each member's encoder output, in member order."""

    members: list[Encoded]


class AttendDifferently(ValueError):
    """The ensemble's models have attention of different shapes: no mean to show."""


class EnsembleCache:
    """Each member's decoder state, reordered together: a beam kept is kept by every member."""

    def __init__(self, members: list[Cache]):
        self.members = members

    def reorder(self, index: Tensor, group: int | None = None) -> None:
        for cache in self.members:
            cache.reorder(index, group)


class Ensemble(nn.Module):
    """log p(y_t | x, y_<t) = log mean_m p_m(y_t | x, y_<t) over the members m."""

    def __init__(self, members: Sequence[Seq2Seq]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one model")
        pads = {member.pad for member in members}
        if len(pads) > 1:
            raise ValueError(f"the models pad with ids {sorted(pads)}: not one vocabulary")
        # A module list when every member is a module (so .eval() and .to() reach them all).
        self.members = (
            nn.ModuleList(members) if all(isinstance(m, nn.Module) for m in members) else members
        )
        self.pad = members[0].pad
        # In evaluation mode when its members all are (search refuses a model that drops units);
        # the flag alone, the members' own left as they are until .eval() or .train().
        self.training = any(getattr(member, "training", False) for member in members)

    @property
    def max_positions(self) -> int | None:
        """The tightest member's limit: no hypothesis may outgrow any member's positions."""
        limits = [m.max_positions for m in self.members if m.max_positions is not None]
        return min(limits) if limits else None

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return _log_mean_prob([member(src, tgt_in) for member in self.members])

    def encode(self, src: Tensor) -> EnsembleEncoded:
        return EnsembleEncoded([member.encode(src) for member in self.members])

    def init_cache(self, encoded: EnsembleEncoded, group: int = 1) -> EnsembleCache:
        pairs = zip(self.members, encoded.members, strict=True)
        return EnsembleCache([member.init_cache(parts, group) for member, parts in pairs])

    def step(self, tokens: Tensor, cache: EnsembleCache) -> Tensor:
        pairs = zip(self.members, cache.members, strict=True)
        return _log_mean_prob([member.step(tokens, state) for member, state in pairs])

    def attention_maps(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, AttentionMaps]:
        """The ensemble's output and, layer by layer, the mean of its members' weights (as an
        alignment from an ensemble is taken): a mean of distributions is one. Members must then
        have attention of one shape (layers, heads)."""
        outputs = [member.attention_maps(src, tgt_in) for member in self.members]
        maps = [m for _, m in outputs]
        mean = AttentionMaps(
            decoder_cross=_mean_by_layer("cross", [m.decoder_cross for m in maps]),
            encoder_self=_mean_by_layer("encoder self", [m.encoder_self for m in maps]),
            decoder_self=_mean_by_layer("decoder self", [m.decoder_self for m in maps]),
        )
        return _log_mean_prob([logits for logits, _ in outputs]), mean


def _log_mean_prob(logits: list[Tensor]) -> Tensor:
    """log (1/M) sum_m softmax(logits_m), in float32 at least, without leaving log space. One
    member's own logits are its distribution's already: an ensemble of one is its member, bit
    for bit."""
    if len(logits) == 1:
        return logits[0]
    log_probs = [torch.log_softmax(x.float() if x.dtype.itemsize < 4 else x, -1) for x in logits]
    return torch.logsumexp(torch.stack(log_probs), 0) - math.log(len(log_probs))


def _mean_by_layer(kind: str, members: list[list[Tensor]]) -> list[Tensor]:
    """The layer-by-layer mean of the members' `kind` attention (each layer's weights (batch,
    heads, queries, keys)); AttendDifferently unless every member has as many layers and heads."""
    shapes = [[tuple(layer.shape) for layer in layers] for layers in members]
    if any(s != shapes[0] for s in shapes):
        heads = [(len(layers), layers[0].size(1) if layers else 0) for layers in members]
        shown = ", ".join(f"{_count(n, 'layer')} of {_count(h, 'head')}" for n, h in heads)
        raise AttendDifferently(
            f"the ensemble's models attend differently ({kind} attention: {shown}): attention "
            "views and alignments need models of as many layers and heads, or one model"
        )
    return [torch.stack(layer).mean(0) for layer in zip(*members, strict=True)]


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


def load_ensemble(paths: Sequence[Path | str]) -> tuple[Ensemble, SavedModel]:
    """The models of `paths` (run folders or checkpoint files) as one ensemble, with the first
    one's SavedModel: its configuration (decoding settings, task) and vocabulary speak for all.

    Refused, naming the models: vocabularies that differ in any piece, and different tasks."""
    saved = [load_model(path) for path in paths]
    first = saved[0]
    for other in saved[1:]:
        if _pieces(other) != _pieces(first):
            raise ValueError(
                f"{other.path} and {first.path} have different vocabularies "
                f"({other.vocab.size} and {first.vocab.size} pieces, or the same number "
                "spelled differently): an ensemble's models must be trained on one `prepare`d "
                "vocabulary"
            )
        if other.config.task != first.config.task:
            raise ValueError(
                f"{other.path} was trained for {other.config.task}, {first.path} for "
                f"{first.config.task}: an ensemble's models must do one task"
            )
    return Ensemble([s.model for s in saved]).eval(), first


def _pieces(saved: SavedModel) -> list[str]:
    return saved.vocab.pieces(range(saved.vocab.size))
