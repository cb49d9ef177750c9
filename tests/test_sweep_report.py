"""The sweep's report (sweep_report.py): Table 3's layout, each row showing only what it changes
from the base, our mean ± sd over the seeds that finished beside the paper's numbers, written as
Markdown, CSV and JSON. Scripted results: nothing is trained."""

import csv
import dataclasses
import io
import json
import statistics

import pytest

from transduce.experiments.sweep import RowResult, RunResult, sweep_base
from transduce.experiments.sweep_report import COLUMNS, summary, write_report
from transduce.experiments.table3 import row_config

BASE = sweep_base("tiny", steps=1200)
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.0"
FAILED = "RuntimeError: out of patience"
CONFIG_COLUMNS = [name for name, _ in COLUMNS]  # N .. positions, then the budget


def _run(seed: int, score: float, ppl: float, parameters: int, updates: int, minutes: float):
    return RunResult("", seed, dev_ppl=ppl, dev_score=score, metric="bleu", signature=SIGNATURE,
                     parameters=parameters, updates=updates, minutes=minutes)  # fmt: skip


def _rows() -> list[RowResult]:
    """B1 first: the deltas are from the row named base, wherever it stands."""
    b1 = RowResult("B1", row_config(BASE, "B1"), runs=[_run(1, 29.0, 6.0, 2_000_000, 90, 0.5)])
    base = RowResult("base", BASE, runs=[
        _run(1, 30.0, 5.0, 2_500_000, 100, 1.0),
        RunResult("base", 2, error=FAILED),
        _run(3, 32.0, 6.0, 2_400_000, 200, 2.0),
    ])  # fmt: skip
    note = "(A) keeps h * d_k | h * d_v\nat this base"  # a "|" would split the Markdown cell
    return [b1, base, RowResult("A2", None, note=note)]


def _table(text: str) -> dict[str, dict[str, str]]:
    """Each Markdown row's cells by column header, keyed by the row's name."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    head = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert lines[1] == "|---" * len(head) + "|"  # one per column, or it is no table
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert all(len(row) == len(head) for row in cells)
    return {row[0]: dict(zip(head, row, strict=True)) for row in cells}


def test_a_rows_numbers_are_the_mean_and_sample_sd_over_the_seeds_that_finished():
    b1, base, a2 = (summary(r) for r in _rows())
    assert base["seeds"] == 2 and base["failed"] == [f"seed 2: {FAILED}"]
    assert base["dev_score"] == 31.0 and base["dev_ppl"] == 5.5
    assert base["dev_score_sd"] == pytest.approx(statistics.stdev([30.0, 32.0]))  # n - 1
    assert (base["updates"], base["minutes"], base["parameters"]) == (150, 1.5, 2_500_000)
    assert (base["paper_ppl"], base["paper_bleu"], base["paper_params_m"]) == (4.92, 25.8, 65)
    assert b1["dev_score"] == 29.0 and b1["dev_score_sd"] is None  # one seed: no spread
    assert (b1["paper_ppl"], b1["paper_bleu"], b1["paper_params_m"]) == (5.16, 25.1, 58)
    assert a2["seeds"] == 0 and a2["dev_score"] is None and a2["parameters"] is None


def test_the_markdown_shows_a_rows_changes_from_the_base_and_the_base_in_full(tmp_path):
    write_report(_rows(), BASE, tmp_path, "tiny, 1,200 steps")
    text = (tmp_path / "table3.md").read_text()
    table = _table(text)
    assert text.startswith("tiny, 1,200 steps\n\n| row | N |")
    model = BASE.model
    assert [table["base"][k] for k in ("N", "d_model", "d_ff", "h", "d_k", "P_drop", "train")] == [
        str(model.n_layers), str(model.d_model), str(model.d_ff), str(model.h), str(model.d_k),
        str(model.dropout), "1,200 steps",
    ]  # fmt: skip
    assert {k: table["B1"][k] for k in CONFIG_COLUMNS if table["B1"][k]} == {
        "d_k": str(model.d_k // 4)  # B1 changes d_k alone
    }
    assert all(table["A2"][k] == "" for k in CONFIG_COLUMNS)  # no config: nothing to show
    assert f"Scored with {SIGNATURE}\n" in text


def test_the_markdown_gives_our_numbers_their_spread_and_the_paper_s_beside_them(tmp_path):
    write_report(_rows(), BASE, tmp_path)
    table = _table((tmp_path / "table3.md").read_text())
    base, b1, a2 = table["base"], table["B1"], table["A2"]
    assert (base["seeds"], base["dev PPL"], base["dev BLEU"]) == (
        "2",
        "5.50 ± 0.71",
        "31.00 ± 1.41",
    )
    assert (b1["dev BLEU"], b1["ΔBLEU"], base["ΔBLEU"]) == ("29.00", "-2.00", "+0.00")
    assert (base["params (M)"], base["updates"], base["minutes"]) == ("2.50", "150", "1.5")
    assert (b1["paper PPL"], b1["paper BLEU"], b1["paper ΔBLEU"]) == ("5.16", "25.1", "-0.7")
    assert (base["paper ΔBLEU"], base["paper params (M)"], b1["paper params (M)"]) == (
        "+0.0", "65", "58"
    )  # fmt: skip
    assert base["notes"] == f"seed 2: {FAILED}"
    assert a2["notes"] == "cannot scale: (A) keeps h * d_k / h * d_v at this base"
    assert a2["seeds"] == "0" and a2["dev BLEU"] == a2["ΔBLEU"] == ""


def test_a_budget_in_minutes_is_shown_in_minutes_and_the_tasks_metric_names_its_columns(tmp_path):
    base = sweep_base("tiny", minutes=2.5)
    f1 = dataclasses.replace(_run(1, 90.0, 3.0, 1, 1, 1.0), metric="f1")
    write_report([RowResult("base", base, runs=[f1])], base, tmp_path)
    table = _table((tmp_path / "table3.md").read_text())
    assert table["base"]["train"] == "2.5 min"
    assert table["base"]["dev F1"] == "90.00" and table["base"]["ΔF1"] == "+0.00"


def test_the_csv_has_every_field_of_each_row_and_its_failures_in_one_cell(tmp_path):
    write_report(_rows(), BASE, tmp_path)
    records = list(csv.DictReader(io.StringIO((tmp_path / "table3.csv").read_text())))
    assert [r["row"] for r in records] == ["B1", "base", "A2"]
    b1, base, a2 = records
    assert (b1["d_k"], b1["d_model"], b1["max_steps"]) == (
        str(BASE.model.d_k // 4), str(BASE.model.d_model), "1200"
    )  # fmt: skip
    assert base["label_smoothing"] == str(BASE.train.label_smoothing)
    assert base["failed"] == f"seed 2: {FAILED}" and base["seeds"] == "2"
    assert base["dev_score"] == "31.0" and base["paper_bleu"] == "25.8"
    assert a2["d_k"] == "" and a2["note"].startswith("(A) keeps")


def test_the_json_keeps_the_description_the_base_and_every_run(tmp_path):
    rows = _rows()
    write_report(rows, BASE, tmp_path, "a description")
    tree = json.loads((tmp_path / "table3.json").read_text())
    assert tree["description"] == "a description"
    assert tree["base"] == json.loads(json.dumps(dataclasses.asdict(BASE)))
    base = tree["rows"][1]
    assert base["row"] == "base" and base["dev_score"] == 31.0
    assert base["runs"] == [dataclasses.asdict(run) for run in rows[1].runs]
    assert base["config"] == tree["base"] and tree["rows"][2]["config"] is None
