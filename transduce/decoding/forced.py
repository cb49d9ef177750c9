"""Forced decoding: the model's log-probability of a target the user gives, not one it searched.

log P(y | x) = sum_t log P(y_t | y_<t, x) over y's subwords and the EOS that ends it, the number
`Hypothesis.log_prob` holds for a target beam search found (fairseq's `--score-reference`,
OpenNMT-py's gold score, Marian's scorer). It ranks n-best lists with other models (reranking,
noisy-channel), filters noisy pairs out of a corpus, and gives a test set's perplexity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..data.batching import collate
from ..data.bpe import Vocab
from ..models import Seq2Seq


@dataclass(frozen=True)
class TargetScore:
    log_prob: float  # log P(y, EOS | x), natural log: beam search's `Hypothesis.log_prob`
    tokens: int  # the subwords scored: y's and its EOS
    unknown: int  # y's subwords that are <unk>: characters the vocabulary lacks

    @property
    def per_token(self) -> float:
        """The mean log-probability of the target's subwords, EOS included."""
        return self.log_prob / self.tokens


def corpus_perplexity(scores: Sequence[TargetScore]) -> float:
    """exp(-sum log P / sum tokens): every subword of every target weighs the same, as the dev
    perplexity of the training log (`training/validation.py`)."""
    total = sum(s.tokens for s in scores)
    return math.exp(-sum(s.log_prob for s in scores) / total) if total else float("nan")


@torch.no_grad()
def score_ids(
    model: Seq2Seq,
    vocab: Vocab,
    pairs: Sequence[tuple[list[int], list[int]]],
    device: torch.device,
    max_tokens: int = 4096,
) -> list[TargetScore]:
    """The score of each (source ids, target ids) pair, both without BOS/EOS, in input order.

    Teacher forcing over batches of pairs sorted by length, each at most `max_tokens` target
    positions padded (the (B, T, V) log-probabilities are the memory a batch costs); one pair
    longer than that has a batch of its own. Padding changes no score: the decoder's causal mask
    keeps each position from the pads after it, and the source mask from the source's pads.
    """
    if getattr(model, "training", False):
        raise ValueError("the model is in training mode (dropout on): call model.eval() first")
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][1]), len(pairs[i][0])))
    results: list[TargetScore | None] = [None] * len(pairs)
    for chunk in _batches(order, [len(pairs[i][1]) + 1 for i in order], max_tokens):
        batch = collate([pairs[i] for i in chunk], vocab.pad, vocab.bos, vocab.eos).to(device)
        # The search's arithmetic: log_softmax in float32 over the whole vocabulary.
        log_probs = torch.log_softmax(model(batch.src, batch.tgt_in).float(), dim=-1)
        picked = log_probs.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)  # (B, T)
        totals = picked.masked_fill(batch.tgt_out == vocab.pad, 0.0).sum(dim=1).tolist()
        for i, total in zip(chunk, totals, strict=True):
            target = pairs[i][1]
            results[i] = TargetScore(total, len(target) + 1, target.count(vocab.unk))
    return [score for score in results if score is not None]


def _batches(order: list[int], lengths: list[int], max_tokens: int) -> list[list[int]]:
    """`order` cut into runs whose padded size (count x longest, ascending) fits `max_tokens`."""
    batches: list[list[int]] = []
    for index, length in zip(order, lengths, strict=True):
        if batches and (len(batches[-1]) + 1) * length <= max_tokens:
            batches[-1].append(index)
        else:
            batches.append([index])
    return batches
