"""The learning-curve plot, drawn from a run's JSON-lines log."""

from __future__ import annotations

import json
from pathlib import Path


def read_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_learning_curve(log_path: Path, png_path: Path) -> None:
    """Training and dev loss against updates, and dev BLEU on a second axis."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    records = read_log(log_path)
    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    figure, loss_axis = plt.subplots(figsize=(7, 4))
    loss_axis.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
    loss_axis.plot([r["step"] for r in valid], [r["loss"] for r in valid], "o-", label="dev loss")
    loss_axis.set_xlabel("update")
    loss_axis.set_ylabel("loss per token (label-smoothed)")
    lines, labels = loss_axis.get_legend_handles_labels()
    if any("bleu" in r for r in valid):
        bleu_axis = loss_axis.twinx()
        scored = [r for r in valid if "bleu" in r]
        bleu_axis.plot(
            [r["step"] for r in scored],
            [r["bleu"] for r in scored],
            "s-",
            color="C2",
            label="dev BLEU",
        )
        bleu_axis.set_ylabel("BLEU")
        more_lines, more_labels = bleu_axis.get_legend_handles_labels()
        lines, labels = lines + more_lines, labels + more_labels
    loss_axis.legend(lines, labels, loc="center right")
    figure.tight_layout()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png_path, dpi=100)
    plt.close(figure)
