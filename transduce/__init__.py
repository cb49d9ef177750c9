"""transduce: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

The public API, one import away; each name lives in the module of its paper section.
"""

from .config import Config, DecodeConfig, ModelConfig, TrainConfig, base, big, preset, table3, tiny
from .corpus import DataError, corpus_files, read_parallel
from .dataset import PreparedData, prepare
from .metrics import bleu, chrf
from .search import Hypothesis, beam_search, greedy_search
from .train import TrainingError, train
from .transformer import Transformer
from .translate import Translator

__version__ = "0.1.0"

__all__ = [
    "Config",
    "DataError",
    "DecodeConfig",
    "Hypothesis",
    "ModelConfig",
    "PreparedData",
    "TrainConfig",
    "TrainingError",
    "Transformer",
    "Translator",
    "base",
    "beam_search",
    "big",
    "bleu",
    "chrf",
    "corpus_files",
    "greedy_search",
    "prepare",
    "preset",
    "read_parallel",
    "table3",
    "tiny",
    "train",
]  # fmt: skip
