"""Sampling instead of search: each token drawn from the model's distribution, not its best.

Back-translation (Sennrich et al. 2016) turns text of the target language into training pairs
with a model of the reverse direction; Edunov et al. (2018) found sources sampled from that model
teach more than its beam's best, which are too regular. A sample reads the model as search does
(`search.next_token_log_probs`: no padding or BOS, EOS forced at the length limit), optionally
sharpened or flattened (`temperature`) and cut to its likeliest tokens (`top_k`, or the nucleus
`top_p` of Holtzman et al. 2020). A sample's `log_prob` is the model's own, untempered and
uncut: the number `transduce score` gives the same pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..models.contract import Seq2Seq
from .prefix import Prefix
from .search import (
    Hypothesis,
    check_searchable,
    guided,
    length_penalty,
    max_lengths,
    next_token_log_probs,
)
from .terms import Terms


@dataclass(frozen=True)
class Sampling:
    samples: int = 1  # drawn for each sentence, independently
    top_k: int = 0  # draw among the k likeliest tokens only; 0: among all
    top_p: float = 1.0  # among the fewest likeliest tokens whose probability reaches p
    temperature: float = 1.0  # logits / T: below 1 sharper, above 1 flatter
    seed: int = 0  # the same input, settings and seed draw the same samples

    def generator(self, device: torch.device) -> torch.Generator:
        return torch.Generator(device=device).manual_seed(self.seed)

    def __post_init__(self) -> None:
        checks = {
            "samples must be an int >= 1": isinstance(self.samples, int) and self.samples >= 1,
            "top_k must be an int >= 0": isinstance(self.top_k, int) and self.top_k >= 0,
            "top_p must be in (0, 1]": 0.0 < self.top_p <= 1.0,
            "temperature must be > 0 and finite": 0.0 < self.temperature < float("inf"),
            "seed must be an int": isinstance(self.seed, int),
        }
        if broken := [message for message, holds in checks.items() if not holds]:
            raise ValueError(f"sampling: {'; '.join(broken)} ({self})")


@torch.no_grad()
def sample(
    model: Seq2Seq,
    src: Tensor,
    sampling: Sampling,
    *,
    bos: int,
    eos: int,
    pad: int,
    alpha: float = 0.0,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    max_len: int | None = None,
    generator: torch.Generator | None = None,
    prefixes: Sequence[Prefix | Sequence[int]] | None = None,
    avoid: Terms | Sequence[Sequence[int]] | None = None,
    no_repeat_ngram: int = 0,
) -> list[list[Hypothesis]]:
    """src (B, S) -> for each sentence its `sampling.samples` samples, best score first (scored
    with the length penalty `alpha`, as beam search's n best are). Each sample is a row of its
    own, the source repeated for it; a row leaves the batch at its EOS. `generator`: the random
    stream to draw from, e.g. one for every batch of a file (default: a new one from the seed).
    `prefixes` (a `Prefix` or token ids per sentence): each sample starts with its sentence's;
    `avoid` and `no_repeat_ngram` as in search (`search.guided`).
    """
    check_searchable(model, alpha=alpha)
    n, device = sampling.samples, src.device
    generator = generator or sampling.generator(device)
    src = src.repeat_interleave(n, dim=0)
    limit = max_lengths(src, pad, max_len_a, max_len_b, max_len)
    if prefixes is not None:
        prefixes = [prefix for prefix in prefixes for _ in range(n)]  # as the source's rows
    constraint, _, limit = guided(prefixes, None, avoid, no_repeat_ngram, None, limit, eos)
    cache = model.init_cache(model.encode(src), 1)
    rows = torch.arange(src.size(0), device=device)  # the sample of each live row
    history = torch.full((src.size(0), 1), bos, dtype=torch.long, device=device)
    log_prob = torch.zeros(src.size(0), device=device)
    results: list[list[Hypothesis]] = [[] for _ in range(src.size(0) // n)]
    for t in range(1, int(limit.max()) + 1):
        log_probs = next_token_log_probs(
            model, history[:, -1:], cache, limit[rows] - t, (bos, eos, pad), constraint
        )
        drawn = torch.multinomial(_drawing_probs(log_probs, sampling), 1, generator=generator)
        log_prob += log_probs.gather(1, drawn).squeeze(1)
        history = torch.cat([history, drawn], dim=1)
        if constraint is not None:
            constraint.advance(drawn.squeeze(1))
        ended = history[:, -1] == eos
        for row in ended.nonzero().flatten().tolist():
            tokens, total = history[row, 1:-1].tolist(), float(log_prob[row])
            score = total / length_penalty(len(tokens) + 1, alpha)
            results[int(rows[row]) // n].append(Hypothesis(tokens, total, score))
        keep = (~ended).nonzero().flatten()
        if keep.numel() == 0:
            break
        if keep.numel() < rows.numel():
            cache.reorder(keep)
            if constraint is not None:
                constraint.reorder(keep)
            rows, history, log_prob = rows[keep], history[keep], log_prob[keep]
    return [sorted(found, key=lambda h: -h.score) for found in results]


def _drawing_probs(log_probs: Tensor, sampling: Sampling) -> Tensor:
    """(N, V) the distribution a token is drawn from: tempered, cut to the top k and to the
    nucleus of mass top_p (the likeliest token always stays), renormalised."""
    logits = log_probs / sampling.temperature
    if 0 < sampling.top_k < logits.size(1):
        kth = logits.topk(sampling.top_k, dim=1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -torch.inf)
    if sampling.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=1, descending=True)
        probs = sorted_logits.softmax(dim=1)
        likelier_mass = probs.cumsum(dim=1) - probs  # of the tokens before each, sorted
        outside = likelier_mass >= sampling.top_p  # the nucleus reached without it
        outside = torch.zeros_like(outside).scatter(1, order, outside)  # back in vocabulary order
        logits = logits.masked_fill(outside, -torch.inf)
    return logits.softmax(dim=1)
