"""transduce: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

The public API, one import away; each name lives in the module of its paper section. The
function `train.train` is not re-exported, so that `transduce.train` stays the module.
"""

from .config import Config, DecodeConfig, ModelConfig, TrainConfig, base, big, preset, table3, tiny
from .corpus import DataError, corpus_files, read_parallel
from .dataset import PreparedData, prepare
from .metrics import bleu, chrf
from .search import Hypothesis, beam_search, greedy_search
from .train import Trainer, TrainingError
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
    "Trainer",
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
]
