"""Greedy and beam search (s6.1): beam 4, length penalty alpha = 0.6, maximum length input + 50,
terminating early when possible.

Search talks to a model through the contract's `encode`, `init_cache` and `step`, and to the
decoder state only through `cache.reorder`, so it never branches on the model family.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..models.contract import Cache, Seq2Seq
from .avoid import with_avoided
from .constraints import Constraint
from .prefix import Prefix, with_prefixes
from .repeats import with_no_repeat
from .terms import TermConstraint, Terms, with_terms


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    log_prob: float  # log P(tokens, EOS | source)
    score: float  # log_prob / length_penalty(len(tokens) + 1): EOS is a token
    missing: int = 0  # terms it lacks (`decoding/terms.py`): ended by the length limit


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016), the paper's length penalty."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(src: Tensor, pad: int, a: float, b: int, cap: int | None = None) -> Tensor:
    """(B,) the most tokens (EOS included) each hypothesis may have: a * |x| + b, at most `cap`.

    |x| is the source length without its EOS: the paper's "input length + 50".
    """
    limit = (a * ((src != pad).sum(dim=1) - 1).clamp(min=0) + b).long()
    return limit if cap is None else limit.clamp(max=cap)


def next_token_log_probs(
    model: Seq2Seq,
    tokens: Tensor,
    cache: Cache,
    room: Tensor,
    specials: tuple[int, int, int],
    constraint: Constraint | None,
) -> Tensor:
    """(N, V) log-probabilities; padding and BOS are never generated, `constraint` masks what
    it rules out, and rows at their length limit (`room`, tokens left before the end, 0) may
    only end."""
    bos, eos, pad = specials
    log_probs = torch.log_softmax(model.step(tokens, cache).float(), dim=-1)
    log_probs[:, [pad, bos]] = float("-inf")
    if constraint is not None:
        constraint.restrict(log_probs, room)
    forced_end = room <= 0
    if bool(forced_end.any()):
        eos_only = torch.full_like(log_probs[forced_end], float("-inf"))
        eos_only[:, eos] = log_probs[forced_end, eos]
        log_probs[forced_end] = eos_only
    return log_probs


def check_searchable(model: Seq2Seq, beam_size: int = 1, n_best: int = 1, alpha: float = 0.0):
    """A model in training mode drops units at random: its outputs would change call to call.
    (A `Seq2Seq` need not be a torch module: one without the flag has no such mode.) And the
    beam's settings as `DecodeConfig` holds them: a beam of 0 failed in a reshape."""
    if getattr(model, "training", False):
        raise ValueError("the model is in training mode (dropout on): call model.eval() first")
    if not (isinstance(beam_size, int) and 0 < n_best <= beam_size and 0 <= alpha < float("inf")):
        raise ValueError(
            f"beam_size={beam_size!r}, n_best={n_best!r}, alpha={alpha!r}: beam_size must be an "
            "int >= 1, n_best in 1..beam_size, alpha >= 0 and finite"
        )


@torch.no_grad()
def greedy_search(
    model: Seq2Seq,
    src: Tensor,
    *,
    bos: int,
    eos: int,
    pad: int,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    max_len: int | None = None,
    constraint: Constraint | None = None,
    prefixes: Sequence[Prefix | Sequence[int]] | None = None,
    avoid: Terms | Sequence[Sequence[int]] | None = None,
    no_repeat_ngram: int = 0,
) -> list[list[int]]:
    """The most probable token at each step; src (B, S) -> B token lists without BOS/EOS.
    `constraint` (one row per sentence) rules tokens out, `prefixes` force each output's
    start, `avoid` rules phrases out and `no_repeat_ngram` repeated n-grams, as in
    `beam_search`."""
    check_searchable(model)
    limit = max_lengths(src, pad, max_len_a, max_len_b, max_len)
    constraint, _, limit = guided(prefixes, None, avoid, no_repeat_ngram, constraint, limit, eos)
    cache = model.init_cache(model.encode(src), 1)
    rows = torch.arange(src.size(0), device=src.device)  # the sentence of each live row
    history = torch.full((src.size(0), 1), bos, dtype=torch.long, device=src.device)
    results: list[list[int]] = [[] for _ in range(src.size(0))]
    for t in range(1, int(limit.max()) + 1):
        log_probs = next_token_log_probs(
            model, history[:, -1:], cache, limit[rows] - t, (bos, eos, pad), constraint
        )
        best = top_k(log_probs, 1)[1]  # argmax, 4x faster over a vocabulary (`top_k`)
        history = torch.cat([history, best], dim=1)
        if constraint is not None:
            constraint.advance(history[:, -1])
        ended = history[:, -1] == eos
        for row in ended.nonzero().flatten().tolist():
            results[int(rows[row])] = history[row, 1:-1].tolist()
        keep = (~ended).nonzero().flatten()
        if keep.numel() == 0:
            break
        if keep.numel() < rows.numel():  # drop finished sentences
            cache.reorder(keep)
            if constraint is not None:
                constraint.reorder(keep)
            rows, history = rows[keep], history[keep]
    return results


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    *,
    bos: int,
    eos: int,
    pad: int,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    n_best: int = 1,
    max_len: int | None = None,
    constraint: Constraint | None = None,
    prefixes: Sequence[Prefix | Sequence[int]] | None = None,
    terms: Sequence[Sequence[Sequence[int]]] | None = None,
    avoid: Terms | Sequence[Sequence[int]] | None = None,
    no_repeat_ngram: int = 0,
) -> list[list[Hypothesis]]:
    """Batched beam search; src (B, S) -> for each sentence its n_best hypotheses, best first.

    Each step ranks the beams' k * V extensions by log-probability (the first step: the V
    extensions of BOS, one row per sentence). An EOS among the k best ends a hypothesis, scored
    with the length penalty; the k best others go on. A sentence stops when it has k ended
    hypotheses or reaches its length limit, and leaves the batch. `constraint` (a row a sentence
    to start) masks what it rules out; the guides, `prefixes` to `no_repeat_ngram`: `guided`."""
    check_searchable(model, beam_size, n_best, alpha)
    k, device = beam_size, src.device
    limit = max_lengths(src, pad, max_len_a, max_len_b, max_len)
    guides = (prefixes, terms, avoid, no_repeat_ngram)
    constraint, term_state, limit = guided(*guides, constraint, limit, eos)
    cache = model.init_cache(model.encode(src), 1)  # one row a sentence: BOS, then `width`
    sentences = torch.arange(src.size(0), device=device)  # the sentence of each live entry
    scores = torch.zeros(src.size(0), 1, device=device)  # (n, width): k once k can be kept
    history = torch.full((src.size(0), 1), bos, dtype=torch.long, device=device)
    ended: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    for t in range(1, int(limit.max()) + 1):
        width = scores.size(1)
        room = (limit[sentences] - t).repeat_interleave(width)  # tokens left before the end
        specials = (bos, eos, pad)
        log_probs = next_token_log_probs(model, history[:, -1:], cache, room, specials, constraint)
        top = _best_extensions(scores, log_probs, 2 * k)
        if term_state is not None:  # in the order the banks take them, not by score alone
            top = term_state.allocate(scores, log_probs, top)
        is_eos = top[2] == eos
        _collect_ended(ended, sentences, history, *top[:2], is_eos, width, k, alpha)
        live_scores, next_row, next_token = _first_live(top, is_eos, k)
        finished = torch.tensor([len(ended[s]) >= k for s in sentences.tolist()], device=device)
        finished |= live_scores[:, 0] == float("-inf")  # none left, as at the length limit
        keep = (~finished).nonzero().flatten()
        if keep.numel() == 0:
            break
        rows = (keep[:, None] * width + next_row[keep]).flatten()  # (n' * width',) old rows
        cache.reorder(rows, group=live_scores.size(1))
        history = torch.cat([history[rows], next_token[keep].view(-1, 1)], dim=1)
        if constraint is not None:
            constraint.reorder(rows)
            constraint.advance(history[:, -1])
        scores, sentences = live_scores[keep], sentences[keep]
    return _n_best(ended, n_best, term_state)


def guided(prefixes, terms, avoid, no_repeat_ngram: int, constraint: Constraint | None,
           limit: Tensor, eos: int):  # fmt: skip
    """The search's `constraint` with the guides added: `prefixes` (ids, a list a sentence)
    start the outputs (`decoding/prefix.py`), `terms` (phrases, a list a sentence) each appear
    in them (`decoding/terms.py`), `avoid`'s phrases none (`decoding/avoid.py`), and none
    holds an n-gram of `no_repeat_ngram` tokens twice (`decoding/repeats.py`; 0: off); the
    terms' own state (or None); the length limits (B,) `limit` raised to fit the prefix, then
    the terms, and an EOS."""
    constraint, limit = with_prefixes(prefixes, constraint, limit)
    floor = getattr(constraint, "most_tokens", None)  # a prefix's most tokens
    constraint, term_state, limit = with_terms(terms, constraint, limit, eos, floor)
    constraint = with_avoided(avoid, constraint, limit.numel(), eos, limit.device)
    rows, device = limit.numel(), limit.device
    return with_no_repeat(no_repeat_ngram, constraint, rows, device, term_state), term_state, limit


def _first_live(top: tuple[Tensor, Tensor, Tensor], is_eos: Tensor, k: int):
    """The first k candidates (log P, row, token, each (S, n)) in their order (by score: the
    k best) that do not end; impossible ones (-inf) last."""
    live = top[0].masked_fill(is_eos, float("-inf"))
    order = (live == float("-inf")).int().sort(dim=1, stable=True).indices[:, :k]
    return live.gather(1, order), top[1].gather(1, order), top[2].gather(1, order)


def _n_best(ended: list[list[Hypothesis]], n: int, terms: TermConstraint | None):
    """Each sentence's n best ended hypotheses, best score first; with terms, those holding
    every phrase first (the others ended at the length limit)."""
    if terms is not None:
        for s, hypotheses in enumerate(ended):
            for hypothesis in hypotheses:
                hypothesis.missing = terms.missing(s, hypothesis.tokens)
    return [sorted(h, key=lambda hyp: (hyp.missing, -hyp.score))[:n] for h in ended]


def _best_extensions(scores: Tensor, log_probs: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """Each sentence's n best one-token extensions of its hypotheses, best first.

    scores (S, width) and log_probs (S * width, V) -> log P, row within the sentence and token,
    each (S, min(n, width * V)). A sentence's n best are among each row's own n best tokens, so
    rows are ranked first and then only the width * n survivors of each sentence.
    """
    width = scores.size(1)
    per_row = min(n, log_probs.size(1))
    row_log_probs, row_tokens = top_k(log_probs, per_row)  # (S * width, per_row)
    extended = (scores.view(-1, 1) + row_log_probs).view(-1, width * per_row)
    top_scores, top_index = extended.topk(min(n, width * per_row), dim=1)
    top_token = row_tokens.view(-1, width * per_row).gather(1, top_index)
    return top_scores, top_index // per_row, top_token


def top_k(x: Tensor, k: int, chunk: int = 64) -> tuple[Tensor, Tensor]:
    """`x.topk(k, dim=1)` for rows as wide as a vocabulary, on a CPU about twice as fast (k = 8,
    rows of 8,000) and four times as fast as `argmax` (k = 1).

    Cut each row into chunks of `chunk` columns and a shorter rest: its k largest entries lie in
    the rest or in the k chunks with the largest maxima (an entry in any other chunk has k chunk
    maxima, k distinct entries, at or above it). So one fast pass of maxima picks k chunks, and a
    top-k of their k * chunk entries and the rest finishes. Equal to `topk` up to the order of
    equal values.
    """
    rows, columns = x.shape
    whole = columns // chunk
    if k >= whole or x.device.type != "cpu":  # too narrow to gain; a GPU's own topk is fast
        return x.topk(k, dim=1)
    maxima = x[:, : whole * chunk].view(rows, whole, chunk).amax(dim=2)  # (rows, whole)
    first_columns = maxima.topk(k, dim=1).indices * chunk  # (rows, k)
    candidates = (first_columns[:, :, None] + torch.arange(chunk, device=x.device)).view(rows, -1)
    if columns > whole * chunk:
        rest = torch.arange(whole * chunk, columns, device=x.device).expand(rows, -1)
        candidates = torch.cat([candidates, rest], dim=1)
    values, where = x.gather(1, candidates).topk(k, dim=1)
    return values, candidates.gather(1, where)


def _collect_ended(
    ended: list[list[Hypothesis]],
    sentences: Tensor,
    history: Tensor,
    top_scores: Tensor,
    top_row: Tensor,
    is_eos: Tensor,
    width: int,
    k: int,
    alpha: float,
) -> None:
    """Record the hypotheses that end with EOS among the k best candidates of each sentence.

    An EOS ranked below k would not have been kept by a beam of k, so it does not count.
    """
    ending = is_eos[:, :k] & (top_scores[:, :k] > float("-inf"))
    for i, j in ending.nonzero().tolist():
        tokens = history[i * width + int(top_row[i, j]), 1:].tolist()
        log_prob = float(top_scores[i, j])
        score = log_prob / length_penalty(len(tokens) + 1, alpha)
        ended[int(sentences[i])].append(Hypothesis(tokens, log_prob, score))
