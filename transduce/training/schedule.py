"""The optimiser and the learning-rate schedules (s5.3), chosen by `train.schedule`.

"noam" is eq. 3, the paper's: a linear warmup, then decay as the inverse square root of the step,
scaled by d_model^-0.5. "constant" holds `train.lr` (the recurrent baselines' recipes).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch

from ..config import Config, ConfigError, TrainConfig


def learning_rate(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """eq. 3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), times `scale`.

    Linear warmup for `warmup_steps` updates, then decay as the inverse square root of the step.
    Steps count from 1.
    """
    if step < 1:
        raise ValueError(f"steps count from 1, got {step}")
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


class Schedule(Protocol):
    def rate(self, step: int) -> float:
        """The learning rate of update `step` (counting from 1)."""
        ...


class Noam:
    """eq. 3 for a model of width `d_model`."""

    def __init__(self, d_model: int, warmup_steps: int, scale: float = 1.0):
        self.d_model, self.warmup_steps, self.scale = d_model, warmup_steps, scale

    def rate(self, step: int) -> float:
        return learning_rate(step, self.d_model, self.warmup_steps, self.scale)

    def peak(self) -> float:
        """The largest rate, reached at step == warmup_steps."""
        return self.rate(self.warmup_steps)


class Constant:
    def __init__(self, lr: float):
        self.lr = lr

    def rate(self, step: int) -> float:
        if step < 1:
            raise ValueError(f"steps count from 1, got {step}")
        return self.lr


def make_schedule(config: Config) -> Schedule:
    """The schedule `config.train.schedule`; eq. 3 scales by the model's width d_model."""
    train = config.train
    if train.schedule == "noam":
        return Noam(config.model.d_model, train.warmup_steps, train.lr_scale)
    if train.schedule == "constant":
        return Constant(train.lr)
    raise ConfigError(f"train.schedule {train.schedule!r} is not implemented")


def make_optimizer(
    parameters: Iterable[torch.nn.Parameter], config: TrainConfig, fused: bool = False
) -> torch.optim.Adam:
    """Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9 (s5.3); the rate is set at every step."""
    return torch.optim.Adam(
        parameters,
        lr=0.0,
        betas=(config.beta1, config.beta2),
        eps=config.eps,
        weight_decay=config.weight_decay,
        fused=fused or None,
    )


def set_learning_rate(optimizer: torch.optim.Optimizer, rate: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = rate
