"""Translating text with a trained model: encode, batch by length, beam search, decode (s6.1)."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import torch
from torch import nn

from ..config import DecodeConfig, TaskConfig
from ..data.batching import collate
from ..data.bpe import Vocab
from ..models import Seq2Seq
from ..models.matmul import PackedWeights, as_torch_linears, packed_for_inference
from ..models.saved import load_model
from ..runtime import pick_device
from ..tasks import get_task
from .constraints import TreeConstraint
from .search import Hypothesis, beam_search

logger = logging.getLogger(__name__)


@torch.no_grad()
def decode_ids(
    model: Seq2Seq,
    vocab: Vocab,
    sources: list[list[int]],
    decode: DecodeConfig,
    device: torch.device,
    packed_weights: PackedWeights | None = None,
) -> list[list[Hypothesis]]:
    """Beam search over id sequences (without EOS), batched by length; results in input order.
    `packed_weights`: a store that keeps the weights packed for oneDNN between calls."""
    model.eval()
    cap = model.max_positions  # e.g. learned positions: no hypothesis may outgrow the table
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    results: list[list[Hypothesis]] = [[] for _ in sources]
    with packed_for_inference(packed_weights):
        for start in range(0, len(order), decode.batch_size):
            chunk = order[start : start + decode.batch_size]
            batch = collate([(sources[i], []) for i in chunk], vocab.pad, vocab.bos, vocab.eos)
            constraint = (
                TreeConstraint(vocab, [sources[i] for i in chunk], device)
                if decode.constrained
                else None
            )
            hypotheses = beam_search(
                model,
                batch.src.to(device),
                bos=vocab.bos,
                eos=vocab.eos,
                pad=vocab.pad,
                beam_size=decode.beam_size,
                alpha=decode.alpha,
                max_len_a=decode.max_len_a,
                max_len_b=decode.max_len_b,
                n_best=decode.n_best,
                max_len=cap,
                constraint=constraint,
            )
            for i, hyps in zip(chunk, hypotheses, strict=True):
                results[i] = hyps
    return results


class Translator:
    """A trained model with its vocabulary: raw text in, the task's output out."""

    def __init__(
        self,
        model: Seq2Seq,
        vocab: Vocab,
        decode: DecodeConfig,
        device: torch.device,
        task: TaskConfig | None = None,
    ):
        self.model, self.vocab, self.decode, self.device = model.eval(), vocab, decode, device
        self.task = get_task(task or TaskConfig())
        self.packed_weights: PackedWeights | None = None  # see keep_packed_weights

    def keep_packed_weights(self) -> None:
        """Keep the weights packed for oneDNN from one call to the next, as a server wants: a
        copy of the model's float32 weights is held for the translator's lifetime."""
        self.packed_weights = {}

    @classmethod
    def load(
        cls,
        model: Path | str,
        checkpoint: Path | None = None,
        device: str | None = None,
        int8: bool = False,
    ) -> Translator:
        """A checkpoint file, or a run folder: its averaged model if there is one, else its
        newest checkpoint, or `checkpoint`.

        `int8`: the linear layers' weights in int8 (CPU dynamic quantization, see `quantized`).
        """
        saved = load_model(model, checkpoint)
        target = pick_device(device)
        network = saved.model
        if int8:
            if target.type != "cpu":
                raise ValueError("int8 decoding is for the CPU; on a GPU, leave it out")
            network = quantized(network)
        logger.info("loaded %s (step %s) on %s", saved.path, saved.step, target)
        config = saved.config
        return cls(network.to(target), saved.vocab, config.decode, target, config.task)

    def translate(
        self, lines: list[str], decode: DecodeConfig | None = None
    ) -> list[list[tuple[str, float]]]:
        """For each line its n-best (text, score) pairs; an empty line translates to ''.

        `decode` replaces the run's own decoding settings (config.json's `decode`).
        """
        found = self.hypotheses(lines, decode)
        return [[(text, h.score) for text, h in hyps] for hyps in found]

    def hypotheses(
        self, lines: list[str], decode: DecodeConfig | None = None
    ) -> list[list[tuple[str, Hypothesis]]]:
        """`translate` with each text's hypothesis (its token ids and scores); an empty line
        gives [('', Hypothesis([], 0.0, 0.0))]."""
        decode = decode or self.decode
        if decode.constrained and self.task.config.tags:  # the constraint knows XX, not POS tags
            raise ValueError("constrained search needs a model that writes XX for every tag "
                             "(data from `prepare ptb --no-tags`)")  # fmt: skip
        sources = self.vocab.encode([line.strip() for line in lines])
        self._check_lengths(sources)
        todo = [i for i, line in enumerate(lines) if line.strip()]
        hypotheses = decode_ids(
            self.model,
            self.vocab,
            [sources[i] for i in todo],
            decode,
            self.device,
            self.packed_weights,
        )
        # Every hypothesis of every line through the task's post-processing at once.
        owners = [(i, h) for i, hyps in zip(todo, hypotheses, strict=True) for h in hyps]
        texts = self.vocab.decode([h.tokens for _, h in owners])
        texts = self.task.postprocess(texts, [lines[i].strip() for i, _ in owners])
        results: list[list[tuple[str, Hypothesis]]] = [
            [("", Hypothesis([], 0.0, 0.0))] for _ in lines
        ]
        for i in todo:
            results[i] = []
        for (i, h), text in zip(owners, texts, strict=True):
            results[i].append((text, h))
        return results

    def _check_lengths(self, sources: list[list[int]]) -> None:
        limit = self.model.max_positions
        if limit is None:
            return  # e.g. sinusoids extend to any length
        for line, ids in enumerate(sources, start=1):
            if len(ids) + 1 > limit:
                raise ValueError(
                    f"input line {line}: {len(ids) + 1} subwords exceed the model's "
                    f"max_positions={limit}"
                )


def quantized(model: Seq2Seq) -> Seq2Seq:
    """Every nn.Linear with int8 weights and activations quantized per batch (dynamic).

    The tied embedding / output projection stays float32. On a 2-core CPU, `small` size,
    beam 4: 1.27x float32's sentences/s at batch 64 and 1.26x at batch 1, at +0.08 / -0.28
    BLEU (benchmarks/SPEED.md). An option, not the default: float32 reproduces the model exactly.
    """
    plain = as_torch_linears(copy.deepcopy(model).eval())  # it matches nn.Linear by exact type
    return torch.ao.quantization.quantize_dynamic(plain, {nn.Linear}, torch.qint8, inplace=True)
