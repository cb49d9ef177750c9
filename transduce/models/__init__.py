"""The models: every family implements the contract of contract.py, and `build_model` is the one
place that chooses a family's class from the model section of the config."""

from __future__ import annotations

from typing import Protocol

from torch import nn

from ..config import ConfigError, ModelConfig, RnnConfig, TransformerConfig
from .contract import AttentionMaps, Cache, Encoded, Seq2Seq


class VocabShape(Protocol):
    """What a model needs of the vocabulary: its size and the padding id (bpe.Vocab has both)."""

    @property
    def size(self) -> int: ...

    @property
    def pad(self) -> int: ...


def build_model(config: ModelConfig, vocab: VocabShape) -> Seq2Seq:
    """A freshly initialised model of the family `config.family`, sized for `vocab`.

    `config.vocab_size` is 0 before training has seen the data, else must equal `vocab.size`.
    """
    if config.vocab_size not in (0, vocab.size):
        raise ConfigError(
            f"model.vocab_size={config.vocab_size} but the vocabulary has {vocab.size} entries"
        )
    config = type(config)(**{**vars(config), "vocab_size": vocab.size})
    match config:
        case TransformerConfig():
            from .transformer import Transformer

            return Transformer(config, pad=vocab.pad)
        case RnnConfig():
            from .rnn import RnnEncoderDecoder

            return RnnEncoderDecoder(config, pad=vocab.pad)
    raise ConfigError(f"model.family {config.family!r} has no model")


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters; a tied matrix counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "AttentionMaps",
    "Cache",
    "Encoded",
    "Seq2Seq",
    "VocabShape",
    "build_model",
    "count_parameters",
]
