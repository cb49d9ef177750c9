"""Tiny seeded fixtures: V <= 16, d_model 16, 2 layers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from transduce.config import ModelConfig
from transduce.transformer import Transformer

PAD, UNK, BOS, EOS = 0, 1, 2, 3


def tiny_model_config(**changes) -> ModelConfig:
    fields = dict(n_layers=2, d_model=16, d_ff=32, h=2, d_k=8, d_v=8, dropout=0.0, vocab_size=12)
    fields.update(changes)
    return ModelConfig(**fields)


def tiny_model(seed: int = 0, dtype=torch.float64, **changes) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny_model_config(**changes)).to(dtype).eval()


@pytest.fixture
def model() -> Transformer:
    return tiny_model()


@pytest.fixture
def data_dir() -> Path:
    """The real corpora, for tests marked `realdata`; CI points TRANSDUCE_DATA at them."""
    path = os.environ.get("TRANSDUCE_DATA")
    if not path:
        pytest.skip("TRANSDUCE_DATA is not set")
    return Path(path)
