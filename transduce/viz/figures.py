"""Attention as PNG figures (matplotlib, Agg): the lines of the paper's figures 3-5, heatmaps with
the labels on both axes, and a grid of every layer and head."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from torch import Tensor

# One colour per head, as the paper's figures do (tab10, then tab20 for more heads).
HEAD_COLOURS = [plt.get_cmap("tab10")(i) for i in range(10)] + [
    plt.get_cmap("tab20")(i) for i in range(1, 20, 2)
]


def head_colour(head: int) -> tuple[float, float, float, float]:
    return HEAD_COLOURS[head % len(HEAD_COLOURS)]


def _save(figure: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def draw_lines(ax, weights: Tensor, labels: list[str], heads: list[int], title: str) -> None:
    """Figures 3-5: the words twice, in a row above and below; a line from each word above to
    each word below it attends to, thickness and opacity the weight, one colour per head.

    weights (h, T, T): self-attention of one layer.
    """
    n = len(labels)
    for head in heads:
        colour = head_colour(head)
        for q in range(n):
            for k in range(n):
                w = float(weights[head, q, k])
                if w > 0.05:  # leave out the faint lines, as the figures do
                    ax.plot([q, k], [1, 0], color=colour, lw=4 * w, alpha=min(1.0, 0.15 + w))
    for i, label in enumerate(labels):
        ax.text(i, 1.04, label, ha="center", va="bottom", rotation=60, fontsize=9)
        ax.text(i, -0.04, label, ha="center", va="top", rotation=60, fontsize=9)
    ax.set_xlim(-0.8, n - 0.2)
    ax.set_ylim(-0.5, 1.5)
    ax.axis("off")
    ax.set_title(title, fontsize=10)


def lines_figure(
    weights: Tensor, labels: list[str], layer: int, path: Path, title: str = "encoder"
) -> Path:
    """All heads of one self-attention layer together, then each head on its own."""
    heads = weights.size(0)
    width = max(6.0, 0.45 * len(labels) + 1)
    figure, axes = plt.subplots(heads + 1, 1, figsize=(width, 2.6 * (heads + 1)), squeeze=False)
    draw_lines(axes[0, 0], weights, labels, list(range(heads)), f"{title} layer {layer}: all heads")
    for head in range(heads):
        draw_lines(axes[head + 1, 0], weights, labels, [head], f"head {head}")
    figure.tight_layout()
    return _save(figure, path)


def draw_heatmap(ax, weights: Tensor, queries: list[str], keys: list[str], title: str) -> None:
    """weights (Tq, Tk): rows the queries, columns the keys; the brightest is the largest."""
    top = max(float(weights.max()), 1e-9)
    ax.imshow(weights.numpy(), cmap="viridis", vmin=0.0, vmax=top, aspect="auto")
    ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=8)
    ax.set_yticks(range(len(queries)), queries, fontsize=8)
    ax.set_title(title, fontsize=10)


def heatmap_figure(
    weights: Tensor, queries: list[str], keys: list[str], path: Path, title: str, axes_names: str
) -> Path:
    """One heatmap, heads averaged by the caller or one head; `axes_names` 'query / key'."""
    size = (max(4.0, 0.35 * len(keys) + 2), max(3.5, 0.3 * len(queries) + 2))
    figure, ax = plt.subplots(figsize=size)
    draw_heatmap(ax, weights, queries, keys, title)
    query_name, key_name = axes_names.split(" / ")
    ax.set_ylabel(query_name)
    ax.set_xlabel(key_name)
    figure.colorbar(ax.images[0], ax=ax, fraction=0.04)
    figure.tight_layout()
    return _save(figure, path)


def grid_figure(
    layers: list[Tensor], queries: list[str], keys: list[str], path: Path, title: str
) -> Path:
    """Every layer (rows) x head (columns) as small heatmaps, each scaled to its own largest
    weight (the heatmap figure has the colour bar)."""
    n_layers, n_heads = len(layers), layers[0].size(0)
    cell = max(2.2, 0.18 * max(len(queries), len(keys)) + 1.2)
    figure, axes = plt.subplots(
        n_layers, n_heads, figsize=(cell * n_heads, cell * n_layers), squeeze=False
    )
    for layer, weights in enumerate(layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            draw_heatmap(ax, weights[head], queries, keys, f"layer {layer}, head {head}")
            if head > 0:
                ax.set_yticks([])
            if layer < n_layers - 1:
                ax.set_xticks([])
    figure.suptitle(title)
    figure.tight_layout(rect=(0, 0, 1, 0.97))  # room for the title above the top row
    return _save(figure, path)


def side_by_side_figure(
    panels: list[tuple[Tensor, list[str], list[str], str]], path: Path, title: str
) -> Path:
    """Heatmaps beside each other, one per (weights (Tq, Tk), queries, keys, title), each with
    its own colour scale: e.g. the Transformer's cross attention and the LSTM's alpha_ij."""
    rows = max(len(queries) for _, queries, _, _ in panels)
    width = sum(max(3.5, 0.35 * len(keys) + 1.8) for _, _, keys, _ in panels)
    figure, axes = plt.subplots(
        1, len(panels), figsize=(width, max(3.5, 0.3 * rows + 2.2)), squeeze=False
    )
    for ax, (weights, queries, keys, name) in zip(axes[0], panels, strict=True):
        draw_heatmap(ax, weights, queries, keys, name)
        ax.set_xlabel("source")
    axes[0, 0].set_ylabel("target (the word predicted)")
    figure.suptitle(title)
    figure.tight_layout(rect=(0, 0, 1, 0.95))
    return _save(figure, path)
