"""Fine-tuning: a new run whose model starts from a saved model's weights (`train.init_from`).

The run takes the model as it was saved, its architecture and its weights; all else that training
keeps starts afresh: Adam's moments, the schedule (its warmup again), the update count and the
data's order. That is fairseq's `--finetune-from-model` and OpenNMT-py's `-train_from` with
`-reset_optim all`: new data or a new domain makes a new run, with its own folder and budget.
(`--resume` is the other thing: the same run, continued exactly where it stopped.)

The data must be encoded with the model's own vocabulary (`prepare --vocab MODEL`): each row of
its embeddings is one of those pieces. Of the model's settings only the dropout rates may
change; any other would change the weights' shapes or what they mean, and is refused, named.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from ..config import DROPOUT_RATES, Config, ConfigError, override
from ..data.dataset import PreparedData
from ..models import Seq2Seq, build_model
from ..models.saved import SavedModel, load_model
from .runlog import setting_changes

logger = logging.getLogger(__name__)


def settings_to_fine_tune(model: Path | str) -> Config:
    """A saved model's configuration, as a run that fine-tunes it begins (`train --init`; then
    --config, --set and the flags apply): `train.init_from` names the model, as an absolute path
    so that `--resume` from another folder means the same run."""
    saved = load_model(model)
    return override(saved.config, {"train.init_from": str(Path(model).resolve())})


def initial_model(config: Config, data: PreparedData) -> Seq2Seq:
    """The run's model before its first update: freshly initialised (with the seed set by the
    caller), or, when `train.init_from` names a saved model, holding that model's weights."""
    if not config.train.init_from:
        return build_model(config.model, data.vocab)
    saved = load_model(config.train.init_from)
    _check_same_vocabulary(saved, data)
    _check_same_model(saved, config)
    model = build_model(config.model, data.vocab)
    model.load_state_dict(saved.model.state_dict())
    logger.info(
        "fine-tuning %s (saved at update %s): its weights; a new optimiser, schedule and count",
        saved.path,
        saved.step,
    )
    return model


def _check_same_vocabulary(saved: SavedModel, data: PreparedData) -> None:
    if saved.vocab.serialized != data.vocab.serialized:
        raise ConfigError(
            f"{data.path} is encoded with another vocabulary than {saved.path}'s, whose "
            f"embeddings are rows of its own pieces: prepare the data with --vocab {saved.path}"
        )


def _check_same_model(saved: SavedModel, config: Config) -> None:
    """Only the dropout rates of a saved model may change in the run that fine-tunes it."""
    before, after = saved.config.model, config.model
    rates = [name for name in DROPOUT_RATES if hasattr(before, name) and hasattr(after, name)]
    if type(before) is type(after):
        before = replace(before, **{name: getattr(after, name) for name in rates})
    if before != after:
        changes = setting_changes(replace(config, model=before), config)
        raise ConfigError(
            f"train.init_from={config.train.init_from}: fine-tuning keeps the model as saved but "
            f"for its dropout; this run changes {changes}"
        )
