"""A saved model: a checkpoint file, or a run folder, back to (Config, vocabulary, model).

One file is a whole model: checkpoints carry the resolved Config and the sentencepiece model.
Checkpoints written before the vocabulary travelled inside take it from their run folder.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..data.bpe import Vocab
from ..training.checkpoint import CheckpointError, default_checkpoint, load
from ..training.members import member_folders
from . import Seq2Seq, build_model


@dataclass
class SavedModel:
    model: Seq2Seq  # in evaluation mode, on the CPU
    config: Config
    vocab: Vocab
    path: Path  # the checkpoint file it came from
    step: int | None  # the update it was saved at (an average: its newest)


def given_paths(model: Path | str | Sequence[Path | str]) -> list[Path]:
    """One saved model's path, or several models' (an ensemble's), as a list of paths."""
    return [Path(model)] if isinstance(model, (Path, str)) else [Path(path) for path in model]


def model_paths(model: Path | str | Sequence[Path | str]) -> list[Path]:
    """The saved models `model` names: `given_paths`, with the folder of an ensemble trained at
    once (`train --members`) standing for its members'."""
    return [member for path in given_paths(model) for member in member_folders(path) or [path]]


def load_model(path: Path | str, checkpoint: Path | str | None = None) -> SavedModel:
    """A model from a checkpoint file, or from a run folder (`checkpoint` if given, else its
    averaged model, else its newest checkpoint)."""
    path = Path(path)
    file = Path(checkpoint) if checkpoint else path if path.is_file() else default_checkpoint(path)
    state = load(file)
    if "config" not in state or "model" not in state:
        raise CheckpointError(f"{file}: holds no model (no 'config' or 'model' entry)")
    config = Config.from_dict(json.loads(state["config"]))
    vocab = _vocabulary(state, file, path)
    model = build_model(config.model, vocab)
    model.load_state_dict(state["model"])
    step = state.get("step")
    return SavedModel(model.eval(), config, vocab, file, step if isinstance(step, int) else None)


def load_vocab(path: Path | str) -> Vocab:
    """The vocabulary of a saved model (run folder or checkpoint file), of a prepared data folder,
    or a sentencepiece model file itself: what `prepare --vocab` encodes new data with."""
    path = (member_folders(path) or [Path(path)])[0]  # an ensemble's members share theirs
    if path.is_dir() and (path / "vocab.model").is_file():  # a run's or a prepared folder's
        return Vocab.load(path / "vocab.model")
    if path.suffix == ".model":
        return Vocab.load(path)
    file = path if path.is_file() else default_checkpoint(path)
    return _vocabulary(load(file), file, path)


def _vocabulary(state: dict, file: Path, given: Path) -> Vocab:
    if "vocab" in state:
        return Vocab.from_bytes(state["vocab"])
    # Older checkpoints: the run folder's vocab.model, beside average.pt or above checkpoints/.
    folders = [given] if given.is_dir() else []
    folders += [file.parent, file.parent.parent]
    for folder in folders:
        if (folder / "vocab.model").exists():
            return Vocab.load(folder / "vocab.model")
    raise CheckpointError(
        f"{file}: carries no vocabulary (written before checkpoints held one) and no vocab.model "
        "is beside it; pass its run folder"
    )
