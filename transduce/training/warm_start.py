"""Fine-tuning: a new run whose model starts from a saved model's weights (`train.init_from`).

The run takes the model as it was saved, its architecture and weights, and the recipe it was
trained with (`train --init`); all else starts afresh: Adam's moments, the schedule (its warmup
again), the update count and the data's order. That is fairseq's `--finetune-from-model` and
OpenNMT-py's `-train_from` with `-reset_optim all`: new data or a new domain makes a new run, with
its own folder and budget. (`--resume` is the other thing: one run, continued where it stopped.)

The data must be encoded with the model's own vocabulary (`prepare --vocab MODEL`): each row of
its embeddings is one of those pieces. Of the model's settings only the dropout rates may
change; any other would change the weights' shapes or what they mean, and is refused, named.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from ..config import DROPOUT_RATES, Config, ConfigError, TrainConfig
from ..data.dataset import PreparedData
from ..models import Seq2Seq
from ..models.saved import SavedModel, load_model
from .runlog import read_run_config, setting_changes

logger = logging.getLogger(__name__)

# Settings of the saved run that are not its recipe, which the new run takes from TrainConfig's
# defaults unless given: the budget (as `--resume` takes it afresh), what counted from the old
# run's start (late dropout and bidirectional training are for a young model, which this one is
# not), and the machine it ran on.
NOT_INHERITED = ("max_steps", "max_epochs", "max_minutes", "late_dropout", "rdrop_after")
NOT_INHERITED += ("both_ways", "precision", "threads", "compile")


def settings_to_fine_tune(model: Path | str) -> Config:
    """A saved model's configuration, as a run that fine-tunes it begins (`train --init`; then
    --config, --set and the flags apply): `train.init_from` names the model's checkpoint file,
    as an absolute path, so that the run records which weights it began from."""
    saved = load_model(model)
    defaults = TrainConfig()
    fresh = {name: getattr(defaults, name) for name in NOT_INHERITED}
    train = replace(saved.config.train, **fresh, init_from=str(saved.path.resolve()))
    return replace(saved.config, train=train)


def settings_to_resume(run_dir: Path, model: Path | None) -> Config | None:
    """A fine-tuning run's own settings, for `--resume` (None for a run that began afresh): its
    config.json, so that the model it began from need not exist any more. `model`, if given
    again, must be the one it began from."""
    if not (run_dir / "config.json").is_file():
        return None
    _, config = read_run_config(run_dir)
    began = config.train.init_from
    if not began:
        return None
    if model is not None and not Path(began).is_relative_to(Path(model).resolve()):
        raise ConfigError(f"{run_dir} began from {began}, not {model}: --resume it without --init")
    return config


def load_initial_weights(model: Seq2Seq, config: Config, data: PreparedData) -> None:
    """Put `train.init_from`'s weights into a new run's freshly built model (nothing without it),
    after checking that the model and the data's vocabulary are the saved model's."""
    if not config.train.init_from:
        return
    saved = load_model(config.train.init_from)
    _check_same_vocabulary(saved, data)
    _check_same_model(saved, config)
    model.load_state_dict(saved.model.state_dict())
    logger.info(
        "fine-tuning %s (saved at update %s): its weights; a new optimiser, schedule and count",
        saved.path,
        saved.step,
    )


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
