"""transduce: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

The public API, one import away; the names live in the subpackages of their paper sections:

    data = transduce.prepare(transduce.corpus_files("multi30k", "en", "de"), "data/ende",
                             vocab_size=10000, length_filter=transduce.LengthFilter(),
                             description={})
    transduce.train(transduce.tiny(), "data/ende", "runs/ende")
    translator = transduce.load("runs/ende")            # a run folder or one checkpoint file
    # (a list of them: their ensemble, transduce.load(["runs/ende", "runs/ende-seed2"]))
    transduce.train_members(transduce.tiny(), "data/ende", "runs/ende2", 2)  # two at once:
    transduce.load("runs/ende2")                        # their ensemble
    outputs = [best[0][0] for best in translator.translate(["a dog runs ."])]
    print(transduce.score(outputs, ["ein hund rennt ."]))
    translator.score(["a dog runs ."], ["ein hund rennt ."])  # log P(target | source) each
    translator.translate(["a dog runs ."], sampling=transduce.Sampling(seed=1))  # a sample
    translator.translate(["a dog runs ."], prefixes=["ein hu"])  # completes a typed start
    translator.translate(["a dog runs ."], terms=[["Hund"]])  # holds each term
    glossary = translator.glossary([("dog", "Hund")])  # terms for the lines that use them
    translator.translate(lines, terms=glossary.terms(lines))
    print(transduce.explain("the cat sat"))             # one encoder layer, every number

Fine-tuning: new data in the model's vocabulary, then a run that starts from its weights:

    transduce.prepare(files, "data/mine", vocab=transduce.load_vocab("runs/ende"),
                      length_filter=transduce.LengthFilter(), description={})
    transduce.train(transduce.settings_to_fine_tune("runs/ende"), "data/mine", "runs/mine")
"""

from __future__ import annotations

from pathlib import Path

from .config import Config, DecodeConfig, RnnConfig, TaskConfig, TrainConfig, TransformerConfig
from .data.corpus import DataError, LengthFilter, corpus_files, read_parallel
from .data.dataset import PreparedData, prepare
from .decoding.channel import channel_rerank
from .decoding.forced import TargetScore
from .decoding.glossary import Glossary
from .decoding.sampling import Sampling
from .decoding.search import Hypothesis, beam_search, greedy_search
from .decoding.translate import Translator
from .models import Seq2Seq, build_model, count_parameters
from .models.saved import load_model, load_vocab
from .presets import base, big, preset, rnn, rnn_small, rnn_tiny, small, table3, tiny
from .tasks import get_task
from .tasks.metrics import Score, bleu, chrf, term_use
from .training.loop import Trainer, TrainingError, train
from .training.members import train_members
from .training.warm_start import settings_to_fine_tune
from .viz import explain, translate_with_alignments

__version__ = "0.2.0"


def load(model: Path | str | list[Path | str], device: str | None = None) -> Translator:
    """A trained model, ready to translate: a run folder or a single checkpoint file; a list of
    them: their ensemble (the mean of their next-token probabilities)."""
    return Translator.load(model, device=device)


def translate(
    model: Path | str | list[Path | str] | Translator, lines: list[str], **decode: object
) -> list[str]:
    """The best output for each line; `decode` overrides the model's settings (beam_size=...)."""
    from dataclasses import fields, replace

    names = [f.name for f in fields(DecodeConfig)]
    if unknown := sorted(set(decode) - set(names)):
        raise TypeError(f"unknown decoding settings {unknown}; DecodeConfig has {names}")
    translator = model if isinstance(model, Translator) else load(model)
    settings = replace(translator.decode, **decode) if decode else None
    return [best[0][0] for best in translator.translate(lines, settings)]


def score(hypotheses: list[str], references: list[str], task: TaskConfig | None = None) -> Score:
    """The task's corpus score (default: sacreBLEU's BLEU with its signature)."""
    return get_task(task or TaskConfig()).score(hypotheses, references)


__all__ = [
    "Config",
    "DataError",
    "DecodeConfig",
    "Glossary",
    "Hypothesis",
    "LengthFilter",
    "PreparedData",
    "RnnConfig",
    "Sampling",
    "Score",
    "Seq2Seq",
    "TargetScore",
    "TaskConfig",
    "TrainConfig",
    "Trainer",
    "TrainingError",
    "TransformerConfig",
    "Translator",
    "base",
    "beam_search",
    "big",
    "bleu",
    "build_model",
    "channel_rerank",
    "chrf",
    "corpus_files",
    "count_parameters",
    "explain",
    "greedy_search",
    "load",
    "load_model",
    "load_vocab",
    "prepare",
    "preset",
    "read_parallel",
    "rnn",
    "rnn_small",
    "rnn_tiny",
    "score",
    "settings_to_fine_tune",
    "small",
    "table3",
    "term_use",
    "tiny",
    "train",
    "train_members",
    "translate",
    "translate_with_alignments",
]
