"""Validation on the dev set: loss and per-token perplexity, and the task's score (s6.1)."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace

import torch

from ..config import Config
from ..data.batching import TokenBatchSampler, collate
from ..data.dataset import PreparedData
from ..decoding.translate import decode_ids
from ..models import Seq2Seq
from ..tasks import Task
from .loss import model_loss


def validate(
    model: Seq2Seq,
    data: PreparedData,
    config: Config,
    device: torch.device,
    autocast: Callable[[], AbstractContextManager],
    task: Task,
) -> dict:
    """One validation's scores: the dev loss, and the task's score if asked for."""
    scores = dev_loss(model, data, config, device, autocast)
    if config.train.valid_bleu:
        scores[task.metric] = dev_score(model, data, config, device, task)
    return scores


@torch.no_grad()
def dev_loss(
    model: Seq2Seq,
    data: PreparedData,
    config: Config,
    device: torch.device,
    autocast: Callable[[], AbstractContextManager],
) -> dict:
    """Label-smoothed loss, NLL and perplexity per target token of the dev set."""
    model.eval()
    split, vocab = data.split("dev"), data.vocab
    if len(split) == 0:  # a folder prepared before `prepare` refused empty splits
        raise ValueError(f"{data.path}: the dev split has no pairs to score")
    # Every dev pair is scored, the longest too: the budget grows to fit it.
    longest = int(max(split.src_lengths.max(), split.tgt_lengths.max())) + 1
    budget = max(config.data.max_tokens, longest)
    sampler = TokenBatchSampler(
        split.src_lengths, split.tgt_lengths, max_tokens=budget, shuffle=False
    )
    loss = nll = n_tokens = 0.0
    for indices in sampler.batches(0):
        batch = collate(split.pairs(indices), vocab.pad, vocab.bos, vocab.eos).to(device)
        with autocast():
            sums = model_loss(model, batch, config.train.label_smoothing, vocab.pad)
        loss, nll = loss + sums.loss.item(), nll + sums.nll.item()
        n_tokens += sums.n_tokens
    return {"loss": loss / n_tokens, "nll": nll / n_tokens, "ppl": math.exp(nll / n_tokens)}


def dev_score(
    model: Seq2Seq, data: PreparedData, config: Config, device: torch.device, task: Task
) -> float:
    """The task's score of the dev set decoded with `train.valid_beam` (1: greedy, cheap)."""
    split, text = data.split("dev"), data.text("dev")
    sources = [split.pair(i)[0].tolist() for i in range(len(split))]
    # Batches of as many hypotheses as a beam search of the decode settings holds (batch_size
    # sentences x beam_size): greedy over 64 sentences at a time left the products short, and
    # `small`'s dev set took 5.4-5.9 s against 3.6 s in batches of 256 (SPEED.md, session 51).
    beam = config.train.valid_beam
    sentences = max(1, config.decode.batch_size * config.decode.beam_size // beam)
    # In-process (workers=1): a forked copy of a training process, its optimizer and batches
    # included, is no place for a few batches of greedy search.
    decode = replace(config.decode, beam_size=beam, n_best=1, batch_size=sentences, workers=1)
    hypotheses = decode_ids(model, data.vocab, sources, decode, device)
    outputs = data.vocab.decode([h[0].tokens for h in hypotheses])
    source_text = [text.src[i] for i in split.index]
    all_references = task.references(data, "dev")
    references = [all_references[i] for i in split.index]
    return task.score(task.postprocess(outputs, source_text), references).score
