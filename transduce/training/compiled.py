"""torch.compile for training: each layer of the stacks compiled on its own, and the loss's sums.

Compiling the layers one by one ("regional compilation") rather than the whole model: one graph
serves all N layers of a stack (the layers share their code and their weights are the graph's
inputs), so a stack compiles in seconds where the whole model's dynamic-shape compile had not
finished in 5 minutes (benchmarks/SPEED.md). Shapes are dynamic from the first update, since
token-bucketed batches change shape every update. Only training goes through the compiled code:
validation and decoding (a layer in eval mode, or no gradient) run the layers as written, so
their many small shapes compile nothing. On a GPU the compiled layers fuse the layer norms,
residual sums, dropout and bias additions that otherwise cost a kernel each.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def compiles(choice: str, device: torch.device) -> bool:
    """Whether `train.compile` compiles on `device`: "auto" on GPUs only (on a 2-core CPU the
    compiled layers trained `small` at 0.90x the speed in 130 MiB more; on an H100 `base` and `big`
    at 4.4x and 3.5x: benchmarks/SPEED.md)."""
    return choice == "on" or (choice == "auto" and device.type == "cuda")


def compile_layers(model: nn.Module) -> int:
    """Compile the training forward of every encoder and decoder layer of `model` in place.

    Returns how many layers were compiled: 0 for a model without stacks of layers (the recurrent
    baseline), which trains as written.
    """
    layers = [*getattr(model, "encoder_layers", []), *getattr(model, "decoder_layers", [])]
    for layer in layers:
        layer.forward = _compiled_when_training(layer, layer.forward)
    return len(layers)


def _compiled_when_training(layer: nn.Module, eager: Callable) -> Callable:
    compiled = torch.compile(eager, dynamic=True)

    def forward(*args, **kwargs):
        if layer.training and torch.is_grad_enabled():
            return compiled(*args, **kwargs)
        return eager(*args, **kwargs)

    return forward
