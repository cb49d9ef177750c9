"""The optimiser and the learning-rate schedules (s5.3), chosen by `train.schedule`.

"noam" is eq. 3, the paper's: a linear warmup, then decay as the inverse square root of the step,
scaled by d_model^-0.5. "constant" holds `train.lr`. "plateau" is the recurrent baselines' recipe:
`train.lr`, multiplied by `train.plateau_factor` whenever the dev loss has not improved for
`train.plateau_patience` validations. A schedule observes each validation record, and its state
travels in the checkpoints, so a resumed run continues with the rate it had.

Whatever the schedule, `train.cooldown` can end a run with the rate falling linearly to zero
over the last part of its budget (`cooldown_factor`): a run bounded in minutes then finishes on a
settled model instead of mid-stride at eq. 3's still-large rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol

import torch
from torch.autograd.graph import increment_version

from ..config import Config, ConfigError, TrainConfig


def learning_rate(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """eq. 3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), times `scale`.

    Linear warmup for `warmup_steps` updates, then decay as the inverse square root of the step.
    Steps count from 1.
    """
    if step < 1:
        raise ValueError(f"steps count from 1, got {step}")
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def cooldown_factor(budget_used: float, cooldown: float) -> float:
    """The rate's multiplier when `budget_used` (0 to 1) of the run is spent: 1, then from
    1 - `cooldown` falling linearly to 0 at the end of the budget. `cooldown` 0 leaves it at 1.
    """
    if cooldown <= 0:
        return 1.0
    return min(1.0, max(0.0, (1.0 - budget_used) / cooldown))


def budget_used(train: TrainConfig, step: int, epochs: float, elapsed: float) -> float:
    """How much of a run's budget is spent (1 = done): the largest of the fractions of
    `max_steps`, `max_epochs` and `max_minutes` used, of the limits that are set."""
    used = [step / train.max_steps]
    if train.max_epochs:
        used.append(epochs / train.max_epochs)
    if train.max_minutes:
        used.append(elapsed / (60 * train.max_minutes))
    return max(used)


class Schedule(Protocol):
    def rate(self, step: int) -> float:
        """The learning rate of update `step` (counting from 1)."""
        ...

    def observe(self, record: dict) -> None:
        """Take note of a validation record ({"loss": dev loss, ...})."""
        ...

    def state_dict(self) -> dict:
        """What a checkpoint must hold for `load_state_dict` to continue where this stands."""
        ...

    def load_state_dict(self, state: dict) -> None: ...


def _check_step(step: int) -> None:
    if step < 1:
        raise ValueError(f"steps count from 1, got {step}")


class _Stateless:
    """A schedule that is a function of the step alone: validations change nothing."""

    def observe(self, record: dict) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class Noam(_Stateless):
    """eq. 3 for a model of width `d_model`."""

    def __init__(self, d_model: int, warmup_steps: int, scale: float = 1.0):
        self.d_model, self.warmup_steps, self.scale = d_model, warmup_steps, scale

    def rate(self, step: int) -> float:
        return learning_rate(step, self.d_model, self.warmup_steps, self.scale)

    def peak(self) -> float:
        """The largest rate, reached at step == warmup_steps."""
        return self.rate(self.warmup_steps)


class Constant(_Stateless):
    def __init__(self, lr: float):
        self.lr = lr

    def rate(self, step: int) -> float:
        _check_step(step)
        return self.lr


class Plateau:
    """A constant rate, times `factor` after `patience` validations in a row without a lower dev
    loss (never below `min_lr`): Adam's schedule in the recurrent baselines' recipes."""

    def __init__(self, lr: float, factor: float, patience: int, min_lr: float = 0.0):
        self.lr, self.factor, self.patience, self.min_lr = lr, factor, patience, min_lr
        self.best = math.inf  # the lowest dev loss so far
        self.bad = 0  # validations since it was reached

    def rate(self, step: int) -> float:
        _check_step(step)
        return self.lr

    def observe(self, record: dict) -> None:
        if record["loss"] < self.best:
            self.best, self.bad = record["loss"], 0
            return
        self.bad += 1
        if self.bad >= self.patience:
            self.lr, self.bad = max(self.lr * self.factor, self.min_lr), 0

    def state_dict(self) -> dict:
        return {"lr": self.lr, "best": self.best, "bad": self.bad}

    def load_state_dict(self, state: dict) -> None:
        self.lr, self.best, self.bad = state["lr"], state["best"], state["bad"]


def make_schedule(config: Config) -> Schedule:
    """The schedule `config.train.schedule`; eq. 3 scales by the model's width d_model."""
    train = config.train
    if train.schedule == "noam":
        return Noam(config.model.d_model, train.warmup_steps, train.lr_scale)
    if train.schedule == "constant":
        return Constant(train.lr)
    if train.schedule == "plateau":
        return Plateau(train.lr, train.plateau_factor, train.plateau_patience, train.min_lr)
    raise ConfigError(f"train.schedule {train.schedule!r} is not implemented")


# Devices whose training takes PyTorch's fused Adam, one kernel over every parameter: on a GPU
# (SPEED.md, GPU), and on a CPU, where PyTorch's default steps parameter by parameter: `small`'s
# step 6.9 ms fused against 20.3 ms, the update 1.03x (`tiny` 1.05x; SPEED.md, session 51).
FUSED_ADAM_DEVICES = frozenset({"cuda", "cpu"})


def make_optimizer(
    parameters: Iterable[torch.nn.Parameter],
    config: TrainConfig,
    device: torch.device | None = None,
) -> torch.optim.Adam:
    """Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 (s5.3); the rate is set at every step.

    PyTorch's fused Adam, one kernel over every parameter, on the devices that have it. That
    kernel writes the parameters without counting the change in their version counters, by which
    the copies of weights kept for decoding (models/derived.py: attention's stacked projections,
    oneDNN's packed weights) know a weight changed: a validation after a step would have decoded
    with the weights of the one before. So each step counts it.
    """
    optimizer = torch.optim.Adam(
        parameters,
        lr=0.0,
        betas=(config.beta1, config.beta2),
        eps=config.eps,
        weight_decay=config.weight_decay,
        fused=(device or torch.device("cpu")).type in FUSED_ADAM_DEVICES,
    )
    if optimizer.defaults["fused"]:
        optimizer.register_step_post_hook(_count_the_change)
    return optimizer


def _count_the_change(optimizer: torch.optim.Optimizer, *_) -> None:
    increment_version([p for group in optimizer.param_groups for p in group["params"]])


def set_learning_rate(optimizer: torch.optim.Optimizer, rate: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = rate
