"""EVALB's report, character for character: the per-sentence table, the totals and the
"=== Summary ===" block (evalb.py computes the numbers)."""

from __future__ import annotations

import math

from .evalb import EvalbResult, Totals, percent

_RULE = "=" * 76
_HEAD = (
    "  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
    " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
    f"{_RULE}\n"
)


def _pct(value: float) -> str:
    # C's printf("%6.2f") of the NaN from 0/0 on x86-64 glibc
    return "  -nan" if math.isnan(value) else f"{value:6.2f}"


def format_report(result: EvalbResult) -> str:
    """The whole of EVALB's standard output: per-sentence table, totals, then the summary."""
    lines = [_HEAD]
    for s in result.sentences:
        lines.append(
            f"{s.id:4d}  {s.length:3d}    {s.status:d}  {s.recall:6.2f} {s.precision:6.2f}   "
            f"{s.matched:3d}    {s.gold_brackets:3d}  {s.test_brackets:3d}    {s.crossing:3d}"
            f"   {s.words:4d}  {s.correct_tags:4d}   {s.tag_accuracy:6.2f}\n"
        )
    total = result.all
    lines.append(f"{_RULE}\n")
    if total.gold_brackets > 0 and total.test_brackets > 0:
        lines.append(
            f"                {total.recall:6.2f} {total.precision:6.2f} {total.matched:6d} "
            f"{total.gold_brackets:5d} {total.test_brackets:5d}  {total.crossing:5d}"
        )
    lines.append(f"  {total.words:5d} {total.correct_tags:5d}   {total.tag_accuracy:6.2f}\n")
    lines.append(format_summary(result))
    return "".join(lines)


def format_summary(result: EvalbResult) -> str:
    """EVALB's "=== Summary ===" block: the "All" and "len<=40" statistics."""
    blocks = [
        _format_block("All", result.all),
        _format_block(f"len<={result.cutoff_len}", result.short),
    ]
    return "=== Summary ===\n" + "".join(blocks)


def _format_block(title: str, t: Totals) -> str:
    rows = [
        ("Number of sentence        ", f"{t.sentences:6d}"),
        ("Number of Error sentence  ", f"{t.error_sentences:6d}"),
        ("Number of Skip  sentence  ", f"{t.skip_sentences:6d}"),
        ("Number of Valid sentence  ", f"{t.valid_sentences:6d}"),
        ("Bracketing Recall         ", _pct(t.recall)),
        ("Bracketing Precision      ", _pct(t.precision)),
        ("Bracketing FMeasure       ", _pct(t.fmeasure)),
        ("Complete match            ", _pct(t.complete_match)),
        ("Average crossing          ", _pct(t.average_crossing)),
        ("No crossing               ", _pct(percent(t.no_crossing, t.valid_sentences))),
        ("2 or less crossing        ", _pct(percent(t.two_or_less_crossing, t.valid_sentences))),
        ("Tagging accuracy          ", _pct(t.tag_accuracy)),
    ]
    return f"\n-- {title} --\n" + "".join(f"{name}= {value}\n" for name, value in rows)
