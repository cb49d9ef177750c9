"""The task seam: what a task (translation; parsing next) adds to the shared model and search.

A task post-processes decoded text, scores it, names the metric that ranks checkpoints and
supplies its decoding defaults. Validation and the CLI ask the task, never the dataset.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import TYPE_CHECKING, Protocol

from ..config import Config, ConfigError, DecodeConfig, TaskConfig
from .metrics import Score

if TYPE_CHECKING:
    from ..data.dataset import PreparedData


class Task(Protocol):
    """One task, configured by a `TaskConfig` (recorded in the prepared data and the run)."""

    metric: str  # the name of `score`'s number in logs, e.g. "bleu"
    higher_is_better: bool  # for ranking checkpoints by `metric`

    def decode_defaults(self) -> DecodeConfig:
        """The search settings the task's published results use."""
        ...

    def postprocess(self, outputs: list[str], sources: list[str]) -> list[str]:
        """Decoded text (pieces joined) of each source line -> the task's output format."""
        ...

    def targets(self, outputs: list[str], sources: list[str]) -> list[str]:
        """Outputs in the task's format -> the text the model writes for them, to be scored
        (`decoding/forced.py`): `postprocess` run backwards."""
        ...

    def references(self, data: PreparedData, split: str) -> list[str]:
        """What `score` compares a split's outputs with, one per line of its text."""
        ...

    def score(self, hypotheses: list[str], references: list[str]) -> Score:
        """The corpus-level score that ranks checkpoints, with a signature saying how it was
        computed."""
        ...

    def report(self, hypotheses: list[str], references: list[str]) -> list[Score]:
        """Every score `transduce evaluate` prints, `score` first."""
        ...


def get_task(config: TaskConfig) -> Task:
    """The task `config.name`, configured by `config`."""
    if config.name == "translation":
        from .translation import Translation

        return Translation(config)
    if config.name == "parse":
        from .parsing import Parsing

        return Parsing(config)
    raise ConfigError(f"task.name {config.name!r} has no implementation")


def decode_settings(task: TaskConfig, chosen: DecodeConfig) -> DecodeConfig:
    """The task's decoding defaults (s6.1 for translation, s6.3 for parsing), with each setting
    `chosen` moved off DecodeConfig's: `--set decode.alpha=0.5` on a parsing run keeps its beam
    of 21 and +300 tokens."""
    untouched = DecodeConfig()
    changed = {
        f.name: getattr(chosen, f.name)
        for f in fields(DecodeConfig)
        if getattr(chosen, f.name) != getattr(untouched, f.name)
    }
    return replace(get_task(task).decode_defaults(), **changed)


def resolve_config(config: Config, data: PreparedData) -> Config:
    """A run's config: the vocabulary size and the task come from the prepared data, and
    each decoding setting left at its default becomes the task's (`decode_settings`)."""
    model = replace(config.model, vocab_size=data.vocab.size)
    decode = decode_settings(data.task, config.decode)
    if decode.no_repeat_ngram and data.task.name != "translation":
        raise ConfigError("decode.no_repeat_ngram is for translation: a parser's trees repeat "
                          "their brackets")  # fmt: skip
    _check_positions(config, data)
    return replace(config, model=model, task=data.task, decode=decode)


def _check_positions(config: Config, data: PreparedData) -> None:
    """A table of learned positions holds the longest training and dev pair (EOS or BOS
    included), or the run would fail at the first batch that does not fit, minutes in."""
    if getattr(config.model, "positions", None) != "learned":
        return
    splits = [data.split(name) for name in ("train", "dev") if name in data.splits]
    longest = max(int(max(s.src_lengths.max(), s.tgt_lengths.max())) for s in splits if len(s))
    if longest + 1 > config.model.max_positions:
        fix = (  # a model fine-tuned keeps its table of positions (training/warm_start.py)
            f"prepare the data with --max-len {config.model.max_positions - 1}, and a dev set "
            "within it"
            if config.train.init_from
            else f"set model.max_positions={longest + 1} or more, or prepare the data with a "
            "smaller maximum length"
        )
        raise ConfigError(
            f"model.max_positions={config.model.max_positions} is shorter than the data's longest "
            f"sentence ({longest} subwords + EOS): {fix}"
        )


__all__ = ["Score", "Task", "decode_settings", "get_task", "resolve_config"]
