"""The sweep's report: Table 3 with our numbers beside the paper's, as Markdown, CSV and JSON.

As in the paper, a row shows only the columns it changes from the base; with several seeds a
number is the mean ± the sample standard deviation over the seeds that finished.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Config
from .table3 import row

if TYPE_CHECKING:
    from .sweep import RowResult

BASE_BLEU = row("base").bleu
# (header, the config value it shows); `train` is the budget: updates, or minutes.
COLUMNS = (
    ("N", lambda c: c.model.n_layers),
    ("d_model", lambda c: c.model.d_model),
    ("d_ff", lambda c: c.model.d_ff),
    ("h", lambda c: c.model.h),
    ("d_k", lambda c: c.model.d_k),
    ("d_v", lambda c: c.model.d_v),
    ("P_drop", lambda c: c.model.dropout),
    ("eps_ls", lambda c: c.train.label_smoothing),
    ("positions", lambda c: c.model.positions),
    ("train", lambda c: _budget(c)),
)


def _budget(config: Config) -> str:
    train = config.train
    return f"{train.max_minutes:g} min" if train.max_minutes else f"{train.max_steps:,} steps"


def summary(result: RowResult) -> dict:
    """The row's numbers over its finished seeds, its failures, and the paper's numbers."""
    done = [r for r in result.runs if not r.error]
    paper = row(result.row)

    def mean_sd(name: str) -> tuple[float | None, float | None]:
        values = [getattr(r, name) for r in done]
        if not values:
            return None, None
        return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else None

    ppl, ppl_sd = mean_sd("dev_ppl")
    score, score_sd = mean_sd("dev_score")
    return {
        "row": result.row,
        "seeds": len(done),
        "failed": [f"seed {r.seed}: {r.error}" for r in result.runs if r.error],
        "dev_ppl": ppl,
        "dev_ppl_sd": ppl_sd,
        "dev_score": score,
        "dev_score_sd": score_sd,
        "parameters": done[0].parameters if done else None,
        "updates": mean_sd("updates")[0],
        "minutes": mean_sd("minutes")[0],
        "paper_ppl": paper.ppl,
        "paper_bleu": paper.bleu,
        "paper_params_m": paper.params_m,
        "note": result.note,
    }


def write_report(rows: list[RowResult], base: Config, out: Path, description: str = "") -> None:
    """table3.md, table3.csv and table3.json in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    summaries = [summary(r) for r in rows]
    (out / "table3.md").write_text(markdown(rows, summaries, base, description))
    (out / "table3.csv").write_text(_csv(rows, summaries))
    tree = {
        "description": description,
        "base": dataclasses.asdict(base),
        "rows": [
            {**s, "config": dataclasses.asdict(r.config) if r.config else None,
             "runs": [dataclasses.asdict(run) for run in r.runs]}
            for r, s in zip(rows, summaries, strict=True)
        ],
    }  # fmt: skip
    (out / "table3.json").write_text(json.dumps(tree, indent=2))


def _number(value: float | None, sd: float | None, digits: int = 2) -> str:
    if value is None:
        return ""
    return f"{value:.{digits}f}" + (f" ± {sd:.{digits}f}" if sd is not None else "")


def _config_cells(config: Config | None, base: Config, is_base: bool) -> list[str]:
    """The row's value of each column, blank where it is the base's (the paper's layout)."""
    if config is None:
        return [""] * len(COLUMNS)
    return [
        str(value(config)) if is_base or value(config) != value(base) else ""
        for _, value in COLUMNS
    ]


def markdown(rows: list[RowResult], summaries: list[dict], base: Config, description: str) -> str:
    metric = next((run.metric for r in rows for run in r.runs if run.metric), "bleu").upper()
    head = [name for name, _ in COLUMNS] + [
        "seeds", "dev PPL", f"dev {metric}", f"Δ{metric}", "params (M)", "updates", "minutes",
        "paper PPL", "paper BLEU", "paper ΔBLEU", "paper params (M)", "notes",
    ]  # fmt: skip
    lines = ["| row | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    base_score = next((s["dev_score"] for s in summaries if s["row"] == "base"), None)
    for result, s in zip(rows, summaries, strict=True):
        delta = None if None in (s["dev_score"], base_score) else s["dev_score"] - base_score
        cells = [*_config_cells(result.config, base, result.row == "base"), *_cells(s, delta)]
        lines.append(f"| {result.row} | " + " | ".join(cells) + " |")
    signatures = sorted({run.signature for r in rows for run in r.runs if run.signature})
    return (
        (f"{description}\n\n" if description else "")
        + "\n".join(lines)
        + "\n\nDev scores: the last checkpoint, beam search, no averaging; mean ± sd over seeds."
        + ("\nScored with " + "; ".join(signatures) + "\n" if signatures else "\n")
    )


def _cells(s: dict, delta: float | None) -> list[str]:
    notes = ([f"cannot scale: {s['note']}"] if s["note"] else []) + s["failed"]
    return [
        str(s["seeds"]),
        _number(s["dev_ppl"], s["dev_ppl_sd"]),
        _number(s["dev_score"], s["dev_score_sd"]),
        "" if delta is None else f"{delta:+.2f}",
        "" if s["parameters"] is None else f"{s['parameters'] / 1e6:.2f}",
        "" if s["updates"] is None else f"{s['updates']:,.0f}",
        _number(s["minutes"], None, 1),
        f"{s['paper_ppl']:.2f}",
        f"{s['paper_bleu']:.1f}",
        f"{s['paper_bleu'] - BASE_BLEU:+.1f}",
        "" if s["paper_params_m"] is None else str(s["paper_params_m"]),
        "; ".join(n.replace("|", "/").replace("\n", " ") for n in notes),
    ]


def _csv(rows: list[RowResult], summaries: list[dict]) -> str:
    names = ["n_layers", "d_model", "d_ff", "h", "d_k", "d_v", "dropout", "label_smoothing",
             "positions", "max_steps", "max_minutes"]  # fmt: skip
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    keys = [k for k in summaries[0] if k != "row"] if summaries else []
    writer.writerow(["row", *names, *keys])
    for result, s in zip(rows, summaries, strict=True):
        numbers = ["; ".join(v) if k == "failed" else v for k, v in s.items() if k != "row"]
        writer.writerow([result.row, *(_field(result.config, n) for n in names), *numbers])
    return buffer.getvalue()


def _field(config: Config | None, name: str) -> object:
    if config is None:
        return ""
    section = config.train if hasattr(config.train, name) else config.model
    return getattr(section, name, "")
