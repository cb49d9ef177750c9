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
    prefixes: list[str] | None = None,
    terms: list[list[str]] | None = None,
    avoid: list[str] | None = None,
) -> list[list[tuple[str, float]]]:
    """Each line's beam candidates (all `beam_size` of them; each starting with the line's
    prefix, holding its terms and none of `avoid`, if given), best first by score + weight *
    log P(line | candidate), with that sum as their score; an empty line gives [('', 0.0)]."""
    found = scored_candidates(forward, reverse, lines, decode, prefixes, terms, avoid)
    return rerank(found, weight)


def scored_candidates(
    forward: Translator,
    reverse: Translator,
    lines: list[str],
    decode: DecodeConfig | None = None,
    prefixes: list[str] | None = None,
    terms: list[list[str]] | None = None,
    avoid: list[str] | None = None,
) -> list[list[tuple[str, float, float, int]]]:
    """Each line's beam candidates as (text, beam score, log P(line | text), terms it lacks);
    an empty line has none. Decoded and scored once, to be re-ranked at any weight (`rerank`)."""
    decode = decode or forward.decode
    every = replace(decode, n_best=decode.beam_size)
    found = forward.hypotheses(lines, every, prefixes=prefixes, terms=terms, avoid=avoid)
    # Candidates that lack a term (ended by the length limit) are not candidates beside those
    # that hold them all, whatever the channel says.
    found = [[(text, h.score, h.missing) for text, h in hyps
              if h.missing == min(x.missing for _, x in hyps)] for hyps in found]  # fmt: skip
    todo = [i for i, line in enumerate(lines) if line.strip()]
    candidates = [text for i in todo for text, _, _ in found[i]]
    explained = [lines[i] for i in todo for _ in found[i]]
    channel = iter(reverse.score(candidates, explained)) if candidates else iter(())
    results: list[list[tuple[str, float, float, int]]] = [[] for _ in lines]
    for i in todo:
        results[i] = [(text, score, next(channel).log_prob, missing)
                      for text, score, missing in found[i]]  # fmt: skip
    return results


def rerank(
    candidates: list[list[tuple[str, float, float, int]]], weight: float
) -> list[list[tuple[str, float]]]:
    """`scored_candidates` best first by score + weight * channel, with that sum as their score;
    a line without candidates gives [('', 0.0)]."""
    if not 0.0 <= weight < float("inf"):
        raise ValueError(f"weight={weight!r}: the channel's weight must be >= 0 and finite")
    return [
        sorted(((text, score + weight * channel) for text, score, channel, _ in line),
               key=lambda pair: -pair[1]) or [("", 0.0)]
        for line in candidates
    ]  # fmt: skip
