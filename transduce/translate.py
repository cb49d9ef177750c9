"""Translating text with a trained run: encode, batch by length, beam search, decode (s6.1)."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import torch
from torch import nn

from .batching import collate
from .bpe import Vocab
from .checkpoint import CheckpointStore, load
from .config import Config, DecodeConfig
from .matmul import as_torch_linears, packed_for_inference
from .runtime import pick_device
from .search import Hypothesis, beam_search
from .transformer import Transformer

logger = logging.getLogger(__name__)

AVERAGE_FILE = "average.pt"


@torch.no_grad()
def decode_ids(
    model: Transformer,
    vocab: Vocab,
    sources: list[list[int]],
    decode: DecodeConfig,
    device: torch.device,
) -> list[list[Hypothesis]]:
    """Beam search over id sequences (without EOS), batched by length; results in input order."""
    model.eval()
    # Learned positions end at max_positions: no hypothesis may outgrow the table.
    cap = model.config.max_positions if model.config.positions == "learned" else None
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    results: list[list[Hypothesis]] = [[] for _ in sources]
    with packed_for_inference():
        for start in range(0, len(order), decode.batch_size):
            chunk = order[start : start + decode.batch_size]
            batch = collate([(sources[i], []) for i in chunk], vocab.pad, vocab.bos, vocab.eos)
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
            )
            for i, hyps in zip(chunk, hypotheses, strict=True):
                results[i] = hyps
    return results


class Translator:
    """A trained model with its vocabulary: raw text in, translations out."""

    def __init__(
        self, model: Transformer, vocab: Vocab, decode: DecodeConfig, device: torch.device
    ):
        self.model, self.vocab, self.decode, self.device = model.eval(), vocab, decode, device

    @classmethod
    def load(
        cls,
        run_dir: Path,
        checkpoint: Path | None = None,
        device: str | None = None,
        int8: bool = False,
    ) -> Translator:
        """The run's averaged checkpoint if there is one, else its latest; or `checkpoint`.

        `int8`: the linear layers' weights in int8 (CPU dynamic quantization, see `quantized`).
        """
        run_dir = Path(run_dir)
        path = checkpoint or default_checkpoint(run_dir)
        state = load(path)
        config = Config.from_dict(json.loads(state["config"]))
        vocab = Vocab.load(run_dir / "vocab.model")
        model = Transformer(config.model, pad=vocab.pad)
        model.load_state_dict(state["model"])
        target = pick_device(device)
        if int8:
            if target.type != "cpu":
                raise ValueError("int8 decoding is for the CPU; on a GPU, leave it out")
            model = quantized(model)
        logger.info("loaded %s (step %s) on %s", path, state.get("step"), target)
        return cls(model.to(target), vocab, config.decode, target)

    def translate(
        self, lines: list[str], decode: DecodeConfig | None = None
    ) -> list[list[tuple[str, float]]]:
        """For each line its n-best (text, score) pairs; an empty line translates to ''.

        `decode` replaces the run's own decoding settings (config.json's `decode`).
        """
        decode = decode or self.decode
        sources = self.vocab.encode([line.strip() for line in lines])
        self._check_lengths(sources)
        todo = [i for i, line in enumerate(lines) if line.strip()]
        hypotheses = decode_ids(
            self.model, self.vocab, [sources[i] for i in todo], decode, self.device
        )
        results: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in lines]
        for i, hyps in zip(todo, hypotheses, strict=True):
            texts = self.vocab.decode([h.tokens for h in hyps])
            results[i] = [(text, h.score) for text, h in zip(texts, hyps, strict=True)]
        return results

    def _check_lengths(self, sources: list[list[int]]) -> None:
        config = self.model.config
        if config.positions != "learned":
            return  # sinusoids extend to any length
        for line, ids in enumerate(sources, start=1):
            if len(ids) + 1 > config.max_positions:
                raise ValueError(
                    f"input line {line}: {len(ids) + 1} subwords exceed the model's "
                    f"max_positions={config.max_positions}"
                )


def quantized(model: Transformer) -> Transformer:
    """Every nn.Linear with int8 weights and activations quantized per batch (dynamic).

    The tied embedding / output projection stays float32. On a 2-core CPU, `small` size,
    beam 4: 1.27x float32's sentences/s at batch 64 and 1.26x at batch 1, at +0.08 / -0.28
    BLEU (benchmarks/SPEED.md). An option, not the default: float32 reproduces the model exactly.
    """
    plain = as_torch_linears(copy.deepcopy(model).eval())  # it matches nn.Linear by exact type
    return torch.ao.quantization.quantize_dynamic(plain, {nn.Linear}, torch.qint8, inplace=True)


def default_checkpoint(run_dir: Path) -> Path:
    average = run_dir / AVERAGE_FILE
    if average.exists():
        return average
    steps = CheckpointStore(run_dir, keep_last=1).steps()
    if not steps:
        raise FileNotFoundError(f"{run_dir}: no checkpoint found (has training started?)")
    return CheckpointStore(run_dir, keep_last=1).path(steps[-1])
