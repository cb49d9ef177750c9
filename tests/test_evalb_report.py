"""EVALB's report as evalb.c prints it (transduce.tasks.evalb_report): the per-sentence table,
the totals line and the summary's two blocks, on hand-worked cases whose numbers are not
symmetric, so that a column or a block swapped for another shows."""

from transduce.tasks.evalb import evalb
from transduce.tasks.evalb_report import format_report, format_summary

RULE = "=" * 76


def test_the_report_gives_recall_before_precision_and_gold_brackets_before_test():
    # 3 matched of 4 gold and 5 test brackets (duplicate spans match as a multiset): recall 75,
    # precision 60
    gold, test = (
        "(S (NP (NP (NN dogs))) (VP (VBP bark)))",
        "(S (NP (NN dogs)) (VP (VP (VP (VBP bark)))))",
    )
    lines = format_report(evalb([gold], [test])).splitlines()
    assert lines[0].startswith("  Sent.") and lines[2] == lines[4] == RULE  # the table's head
    sentence = "   1    2    0   75.00  60.00     3      4    5      0      2     2   100.00"
    totals = "                 75.00  60.00      3     4     5      0      2     2   100.00"
    assert (lines[3], lines[5]) == (sentence, totals)
    summary = "Bracketing Recall         =  75.00\nBracketing Precision      =  60.00\n"
    assert summary in format_summary(evalb([gold], [test]))


def test_the_totals_line_leaves_out_recall_and_precision_when_a_side_has_no_brackets():
    """evalb.c prints the totals' bracket numbers only when gold and test both have brackets:
    otherwise the line after the rule holds the words and tags alone."""
    for gold, test in (("(S (NN a))", "(NN a)"), ("(NN a)", "(S (NN a))")):
        lines = format_report(evalb([gold], [test])).splitlines()
        assert lines[lines.index(RULE, 3) + 1] == "      1     1   100.00"


def test_the_summary_counts_every_sentence_under_all_and_the_short_ones_under_len_40():
    long = "(S (NP " + "(NN a) " * 41 + ") (VP (VB b)))"  # 42 words: past the cut
    short = "(S (NN a) (NN b))"
    error = ("(S (X a) (X b))", "(S (X a))")  # the words differ
    pairs = [(long, long), (short, short), error, (short, ""), (short, "")]  # two skips
    summary = format_summary(evalb([g for g, _ in pairs], [t for _, t in pairs]))
    counts = "Number of sentence        = {:6d}\nNumber of Error sentence  = {:6d}\n"
    counts += "Number of Skip  sentence  = {:6d}\nNumber of Valid sentence  = {:6d}\n"
    assert f"\n-- All --\n{counts.format(5, 1, 2, 2)}" in summary
    assert f"\n-- len<=40 --\n{counts.format(4, 1, 2, 1)}" in summary
