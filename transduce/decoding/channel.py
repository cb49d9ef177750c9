"""Noisy-channel reranking: the beam's n best re-ranked with a model of the reverse direction.

Each candidate y of a source x is ranked by  score(y | x) + weight * log P(x | y):  the beam's own
score (log-probability over the length penalty) plus the reverse model's log-probability of the
source given the candidate (`Translator.score`), the channel model of Yee et al. (2019) without
their language model. A fluent candidate that drops or invents content explains the source badly:
the adequacy errors a forward model's beam keeps. weight 0 is the beam's own order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..config import DecodeConfig

if TYPE_CHECKING:
    from .translate import Translator

# Chosen on Multi30k's dev set (en->de `tiny` models; benchmarks/noisy_channel.py): choose yours
# on your dev set with that script, since the best weight depends on both models and on alpha.
DEFAULT_WEIGHT = 0.1


def channel_rerank(
    forward: Translator,
    reverse: Translator,
    lines: list[str],
    weight: float = DEFAULT_WEIGHT,
    decode: DecodeConfig | None = None,
) -> list[list[tuple[str, float]]]:
    """Each line's beam candidates (all `beam_size` of them), best first by score + weight *
    log P(line | candidate), with that sum as their score; an empty line gives [('', 0.0)]."""
    if not 0.0 <= weight < float("inf"):
        raise ValueError(f"weight={weight!r}: the channel's weight must be >= 0 and finite")
    decode = decode or forward.decode
    found = forward.translate(lines, replace(decode, n_best=decode.beam_size))
    todo = [i for i, line in enumerate(lines) if line.strip()]
    candidates = [text for i in todo for text, _ in found[i]]
    explained = [lines[i] for i in todo for _ in found[i]]
    channel = iter(reverse.score(candidates, explained)) if candidates else iter(())
    results: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in lines]
    for i in todo:
        scored = [(text, score + weight * next(channel).log_prob) for text, score in found[i]]
        results[i] = sorted(scored, key=lambda pair: -pair[1])
    return results
