"""EVALB with COLLINS.prm (transduce.tasks.evalb): hand-worked cases and the real program.

The numbers in the hand-worked cases are counted by hand from EVALB's README and source;
the one golden report comes from running evalb.c. Where an `evalb` binary is on PATH or
named by $EVALB, random trees are scored by both and the reports must be identical.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from transduce.data.trees import parse_tree
from transduce.tasks.evalb import (
    COLLINS,
    ERROR,
    OK,
    SKIP,
    EvalbInputError,
    evalb,
    evalb_files,
    score_sentence,
)
from transduce.tasks.evalb_report import format_report, format_summary


def test_punctuation_is_deleted_with_its_word_and_attachment_does_not_matter():
    gold = "(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))"
    test = "(S (NP (DT The) (NN cat)) (VP (VBD sat) (. .)))"
    s = score_sentence(gold, test)
    # brackets S(0,3) NP(0,2) VP(2,3) on both sides once '.' is gone
    assert (s.status, s.matched, s.gold_brackets, s.test_brackets) == (OK, 3, 3, 3)
    assert (s.words, s.correct_tags) == (3, 3)
    assert s.length == 4  # punctuation counts for length; only -NONE- does not


def test_advp_and_prt_are_one_label_but_tags_are_compared_raw():
    gold = "(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))))"
    test = "(S (NP (PRP He)) (VP (VBD gave) (ADVP (RB up))))"
    s = score_sentence(gold, test)
    assert (s.matched, s.gold_brackets, s.test_brackets) == (4, 4, 4)
    assert s.correct_tags == 2  # RP vs RB


def test_duplicate_spans_match_as_a_multiset():
    gold = "(S (NP (NP (NN dogs))) (VP (VBP bark)))"  # S, NP, NP, VP
    test = "(S (NP (NN dogs)) (VP (VP (VP (VBP bark)))))"  # S, NP, VP, VP, VP
    result = evalb([gold], [test])
    s = result.sentences[0]
    assert (s.matched, s.gold_brackets, s.test_brackets) == (3, 4, 5)
    assert (round(s.recall, 2), round(s.precision, 2)) == (75.0, 60.0)
    assert round(result.all.fmeasure, 2) == 66.67  # 2 * 60 * 75 / 135


def test_top_empty_elements_and_function_tags():
    gold = "(TOP (S (NP-SBJ=2 (-NONE- *)) (VP-1 (VB go))))"  # TOP gone, NP spans nothing
    s = score_sentence(gold, "(S (VP (VB go)))")
    assert (s.matched, s.gold_brackets, s.test_brackets, s.length) == (2, 2, 2, 1)


def test_unlabelled_wrapper_is_a_bracket_as_in_evalb():
    s = score_sentence("( (S (NN a)))", "(S (NN a))")
    assert (s.matched, s.gold_brackets, s.test_brackets) == (1, 2, 1)


def test_crossing_counts_test_brackets():
    s = score_sentence("(S (A (X a) (X b)) (X c))", "(S (X a) (B (X b) (X c)))")
    assert (s.matched, s.crossing) == (1, 1)  # B(1,3) crosses A(0,2) from the right
    s = score_sentence("(S (X a) (B (X b) (X c)))", "(S (A (X a) (X b)) (X c))")
    assert (s.matched, s.crossing) == (1, 1)  # A(0,2) crosses B(1,3) from the left
    both = "(S (A (X a) (X b)) (B (X c) (X d)))"
    s = score_sentence("(S (X a) (C (X b) (X c)) (X d))", both)
    assert s.crossing == 2  # two test brackets cross the one gold C(1,3)


def test_length_cut_counts_punctuation_but_not_empty_elements():
    words = " ".join(f"(NN w{i})" for i in range(40))
    long_one = f"(S {words} (. .))"  # 41 by EVALB's count
    with_traces = f"(S {words} (-NONE- *) (NP (-NONE- *T*)))"  # 40
    result = evalb([long_one, with_traces], [long_one, f"(S {words})"])
    assert [s.length for s in result.sentences] == [41, 40]
    assert (result.all.sentences, result.short.sentences) == (2, 1)
    assert result.short.words == 40 and result.all.words == 80


def test_length_mismatch_is_an_error_and_an_empty_parse_a_skip():
    gold = "(S (NP (NN a)) (VP (VBZ is)) (. .))"
    mistagged = "(S (NP (NN a)) (VP (VBZ is) (NN .)))"  # '.' kept as a word: 3 vs 2
    result = evalb([gold, gold, gold], [mistagged, None, gold])
    assert [s.status for s in result.sentences] == [ERROR, SKIP, OK]
    totals = result.all
    assert (totals.sentences, totals.error_sentences, totals.skip_sentences) == (3, 1, 1)
    assert (totals.valid_sentences, totals.gold_brackets, totals.matched) == (1, 3, 3)
    assert score_sentence(gold, "(S (NP (NN b)) (VP (VBZ is)))").status == ERROR  # words
    long_gold = "(S " + "(NN w) " * 41 + ")"
    refused = evalb([long_gold, long_gold], ["(S (NN w))", None])
    assert [s.length for s in refused.sentences] == [41, 41]  # the gold's, as EVALB prints it
    assert (refused.all.sentences, refused.short.sentences) == (2, 0)


def test_gold_tags_replace_placeholders_before_scoring():
    gold = parse_tree("(S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))")
    test = parse_tree("(S (NP (XX The) (XX cat)) (VP (XX sat)) (XX .))")
    assert evalb([gold], [test]).sentences[0].status == ERROR  # (XX .) is a word
    s = evalb([gold], [test], gold_tags=True).sentences[0]
    assert (s.status, s.matched, s.correct_tags) == (OK, 3, 3)


def test_unreadable_lines_raise():
    with pytest.raises(EvalbInputError):
        score_sentence("(S (NN a)))", "(S (NN a))")
    with pytest.raises(EvalbInputError):
        score_sentence("(S a (NN b))", "(S (NN a))")


@pytest.mark.parametrize("tag", [",", ":", "``", "''", "."])
def test_each_collins_delete_label_goes_with_its_word(tag):
    gold = f"(S (NP (NN a) ({tag} p)) (VP (VB b)))"
    test = f"(S (NP (NN a)) (VP ({tag} p) (VB b)))"  # attached elsewhere: no matter, it goes
    s = score_sentence(gold, test)
    assert (s.matched, s.gold_brackets, s.test_brackets, s.words, s.length) == (3, 3, 3, 2, 3)


def test_labels_decide_a_match_unless_unlabelled():
    gold, test = "(S (NP (NN a)) (VP (VB b)))", "(S (VP (NN a)) (NP (VB b)))"
    assert score_sentence(gold, test).matched == 1  # S only: the spans agree, the labels not
    assert score_sentence(gold, test, replace(COLLINS, labeled=False)).matched == 3


def test_function_tags_are_cut_at_the_first_dash_or_equals_even_the_first_character():
    s = score_sentence("(S (NP=2 (NN a)) (VP-1 (VB b)))", "(S (NP (NN a)) (VP (VB b)))")
    assert s.matched == 3
    # "=A" cut at its first character is the empty label of an unlabelled bracket
    s = score_sentence("(S (=A (NN a) (NN b)) (NN c))", "(S ( (NN a) (NN b)) (NN c))")
    assert (s.matched, s.gold_brackets) == (2, 2)


def test_equal_labels_hold_for_deletion_and_for_tags_too():
    """EVALB compares with label_comp everywhere: a label equal to a DELETE_LABEL is deleted,
    and tags equal by EQ_LABEL are correct."""
    params = replace(COLLINS, equal_labels=(("ADVP", "PRT"), ("ROOT", "TOP"), ("NN", "NNS")))
    s = score_sentence("(ROOT (S (NN a) (VB b)))", "(S (NNS a) (VB b))", params)
    assert (s.gold_brackets, s.matched, s.correct_tags) == (1, 1, 2)
    s = score_sentence("(ROOT (S (NN a) (VB b)))", "(S (NNS a) (VB b))")
    assert (s.gold_brackets, s.matched, s.correct_tags) == (2, 1, 1)


def test_an_unbalanced_line_on_either_side_is_an_error_sentence():
    assert score_sentence("(S (NN a)", "(S (NN a))").status == ERROR  # a bracket left open
    assert score_sentence("(S (NN a))", "(S (NN a)").status == ERROR
    assert score_sentence("(S (NN a))", "(S (NN a))").status == OK


def test_complete_match_and_crossings_are_rates_over_the_valid_sentences():
    pairs = [
        ("(S (X a) (X b))", "(S (X a) (X b))"),  # complete, no crossing
        ("(S (X a) (X b) (X c))", "(S (A (X a) (X b)) (X c))"),  # one bracket more
        ("(S (A (X a) (X b)) (X c))", "(S (X a) (X b) (X c))"),  # one bracket fewer
        ("(S (A (X a) (X b)) (X c))", "(S (X a) (B (X b) (X c)))"),  # 1 crossing
        ("(S (X a) (C (X b) (X c)) (X d))", "(S (A (X a) (X b)) (B (X c) (X d)))"),  # 2
        # G(0,3) and B(1,3) cross A(0,2) or C(2,4); H(3,6) and D(3,5) cross C or E(4,6): 4
        (
            "(S (A (X a) (X b)) (C (X c) (X d)) (E (X e) (X f)))",
            "(S (G (X a) (B (X b) (X c))) (H (D (X d) (X e)) (X f)))",
        ),
        ("(S (X a) (X b))", "(S (X a))"),  # an error sentence: in no rate
    ]
    result = evalb([g for g, _ in pairs], [t for _, t in pairs])
    assert [s.crossing for s in result.sentences[:6]] == [0, 0, 0, 1, 2, 4]
    totals = result.all
    assert (totals.sentences, totals.valid_sentences, totals.complete) == (7, 6, 1)
    assert round(totals.complete_match, 2) == 16.67  # 1 of 6
    assert round(totals.average_crossing, 2) == 1.17  # 7 crossings / 6
    assert (totals.no_crossing, totals.two_or_less_crossing) == (3, 5)
    assert "Average crossing          =   1.17\nNo crossing               =  50.00\n" in (
        format_summary(result)
    )
    assert "2 or less crossing        =  83.33\n" in format_summary(result)


def test_with_gold_tags_a_failed_parse_is_still_a_skip_sentence():
    gold = "(S (NP (DT The) (NN cat)) (VP (VBD sat)))"
    result = evalb([gold, gold], [None, ""], gold_tags=True)
    assert [s.status for s in result.sentences] == [SKIP, SKIP]


def test_files_are_read_as_fgets_reads_them(tmp_path):
    """A line past 4,999 bytes goes on as a line of its own (here the newline alone: a skip
    sentence); a form feed or carriage return inside a line is only white space."""
    long_tree = "(S " + "(NN a) " * 713 + "    )"
    assert len(long_tree) == 4999
    lines = [long_tree, "(S (NN a)\f(NN b))", "(S (NN a) (NN b))\r"]
    for name in ("gold", "test"):
        (tmp_path / name).write_bytes("".join(f"{line}\n" for line in lines).encode())
    result = evalb_files(tmp_path / "gold", tmp_path / "test")
    assert [s.status for s in result.sentences] == [OK, SKIP, OK, OK]
    assert [s.words for s in result.sentences] == [713, 0, 2, 2]


def test_no_brackets_gives_evalb_nan_fmeasure():
    result = evalb(["(S (. .))"], ["(S (. .))"])  # no words left: a skip sentence
    assert math.isnan(result.all.fmeasure)
    assert "Bracketing FMeasure       =   -nan\n" in format_summary(result)


# From evalb.c with COLLINS.prm on these two sentences.
GOLDEN = [
    (
        "(S (INTJ (RB No)) (, ,) (NP (PRP it)) (VP (VBD was) (RB n't) "
        "(NP (NNP Black) (NNP Monday))) (. .))",
        "(S (INTJ (RB No)) (, ,) (NP (PRP it)) (VP (VBD was) (RB n't) "
        "(NP (NNP Black)) (NNP Monday)) (. .))",
    ),
    (
        "(TOP (S (NP (DT a)) (VP (VB b) (PRT (RP c)))))",
        "(TOP (S (NP (DT a)) (VP (VB b) (ADVP (RB c)))))",
    ),
]
GOLDEN_REPORT_HEAD = """\
   1    8    0   80.00  80.00     4      5    5      0      6     6   100.00
   2    3    0  100.00 100.00     4      4    4      0      3     2    66.67
============================================================================
                 88.89  88.89      8     9     9      0      9     8    88.89
=== Summary ===

-- All --
Number of sentence        =      2
Number of Error sentence  =      0
Number of Skip  sentence  =      0
Number of Valid sentence  =      2
Bracketing Recall         =  88.89
Bracketing Precision      =  88.89
Bracketing FMeasure       =  88.89
Complete match            =  50.00
Average crossing          =   0.00
No crossing               = 100.00
2 or less crossing        = 100.00
Tagging accuracy          =  88.89

-- len<=40 --
"""


def test_report_matches_evalb_output():
    report = format_report(evalb([g for g, _ in GOLDEN], [t for _, t in GOLDEN]))
    assert GOLDEN_REPORT_HEAD in report
    assert report.endswith("Tagging accuracy          =  88.89\n")


# -- against the real program ----------------------------------------------------------

COLLINS_PRM = """\
MAX_ERROR 1000000
CUTOFF_LEN 40
LABELED 1
DELETE_LABEL TOP
DELETE_LABEL -NONE-
DELETE_LABEL ,
DELETE_LABEL :
DELETE_LABEL ``
DELETE_LABEL ''
DELETE_LABEL .
DELETE_LABEL_FOR_LENGTH -NONE-
EQ_LABEL ADVP PRT
"""
LABELS = ["S", "NP", "VP", "PP", "ADVP", "PRT", "TOP", "NP-SBJ", "PP-LOC=2", "-NONE-", "", "X"]
TAGS = ["NN", "DT", "RB", "RP", ",", ".", ":", "``", "''", "-NONE-", "TOP", "ADVP", "-LRB-"]
WORDS = ["a", "b", "c", ",", ".", "*T*-1"]


def random_tree(rng: random.Random, n_words: int) -> list:
    """A mutable tree [label, children]; a preterminal is [tag, word]."""
    nodes: list = [[rng.choice(TAGS), rng.choice(WORDS)] for _ in range(n_words)]
    while len(nodes) > 1 or rng.random() < 0.2:
        start = rng.randrange(len(nodes))
        stop = rng.randint(start + 1, min(len(nodes), start + 3))
        nodes[start:stop] = [[rng.choice(LABELS), nodes[start:stop]]]
    return nodes[0] if isinstance(nodes[0][1], list) else ["S", nodes]


def perturb(rng: random.Random, tree: list) -> str | None:
    """A test line made from `tree` by a few random edits (relabel, retag, move, unary...)."""
    tree = _copy(tree)
    for _ in range(rng.randint(0, 4)):
        inner = [n for n in _nodes(tree) if isinstance(n[1], list)]
        node = rng.choice(inner)
        edit = rng.random()
        if edit < 0.25:
            node[0] = rng.choice(LABELS)
        elif edit < 0.4:
            leaf = rng.choice([n for n in _nodes(tree) if isinstance(n[1], str)])
            leaf[0] = rng.choice(TAGS)
        elif edit < 0.6:
            node[1] = [
                g for c in node[1] for g in (c[1] if _inner(c) and rng.random() < 0.5 else [c])
            ]
        elif edit < 0.8:
            start = rng.randrange(len(node[1]))
            stop = rng.randint(start + 1, len(node[1]))
            node[1][start:stop] = [[rng.choice([*LABELS, node[0]]), node[1][start:stop]]]
        elif edit < 0.9:
            node[1] = [[rng.choice([*LABELS, node[0]]), node[1]]]
        elif edit < 0.97:
            _shift_boundary(rng, node)
        else:
            leaf = rng.choice([n for n in _nodes(tree) if isinstance(n[1], str)])
            leaf[1] = rng.choice(WORDS)
    if rng.random() < 0.02:
        return None
    line = _line(tree)
    return line[:-1] if rng.random() < 0.01 else line


def _shift_boundary(rng: random.Random, node: list) -> None:
    """Move a word across the border of two sister brackets, so that they cross the gold."""
    pairs = [i for i in range(len(node[1]) - 1) if _inner(node[1][i]) and _inner(node[1][i + 1])]
    if pairs:
        i = rng.choice(pairs)
        left, right = node[1][i][1], node[1][i + 1][1]
        if rng.random() < 0.5 and len(left) > 1:
            right.insert(0, left.pop())
        elif len(right) > 1:
            left.append(right.pop(0))


def _inner(node: list) -> bool:
    return isinstance(node[1], list)


def _nodes(tree: list) -> list:
    found = [tree]
    if _inner(tree):
        for child in tree[1]:
            found.extend(_nodes(child))
    return found


def _copy(tree: list) -> list:
    return [tree[0], [_copy(c) for c in tree[1]]] if _inner(tree) else list(tree)


def _line(tree: list) -> str:
    if not _inner(tree):
        return f"({tree[0]} {tree[1]})"
    return f"({tree[0]} {' '.join(_line(c) for c in tree[1])})"


def run_evalb(binary: str, gold: list[str], test: list[str | None], tmp: Path) -> str:
    (tmp / "COLLINS.prm").write_text(COLLINS_PRM)
    (tmp / "gold").write_text("".join(f"{g}\n" for g in gold))
    (tmp / "test").write_text("".join(f"{t or ''}\n" for t in test))
    args = [binary, "-p", str(tmp / "COLLINS.prm"), str(tmp / "gold"), str(tmp / "test")]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


EVALB = os.environ.get("EVALB") or shutil.which("evalb")


@pytest.mark.skipif(EVALB is None, reason="no evalb binary on PATH or in $EVALB")
def test_agrees_with_evalb_on_random_trees(tmp_path):
    rng = random.Random(0)
    gold_trees = [random_tree(rng, rng.randint(1, 45)) for _ in range(400)]
    gold = [_line(t) for t in gold_trees]
    test = [perturb(rng, t) for t in gold_trees]
    expected = run_evalb(EVALB, gold, test, tmp_path)
    assert format_report(evalb_files(tmp_path / "gold", tmp_path / "test")) == expected
    assert format_report(evalb(gold, test, COLLINS)) == expected
    statuses = {s.status for s in evalb(gold, test).sentences}
    assert statuses == {OK, ERROR, SKIP}  # the draw reaches every rule
