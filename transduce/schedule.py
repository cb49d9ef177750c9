"""The optimiser and learning-rate schedule of s5.3."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .config import TrainConfig


def learning_rate(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """eq. 3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), times `scale`.

    Linear warmup for `warmup_steps` updates, then decay as the inverse square root of the step.
    Steps count from 1.
    """
    if step < 1:
        raise ValueError(f"steps count from 1, got {step}")
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


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
