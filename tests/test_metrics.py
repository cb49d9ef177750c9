import math

import pytest

from transduce.tasks.metrics import bleu, chrf


def test_identical_text_scores_100_and_the_signature_is_sacrebleus():
    refs = ["a man rides a horse .", "two dogs play in the snow ."]
    score = bleu(refs, refs)
    assert score.score == pytest.approx(100.0)
    assert score.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert chrf(refs, refs).score == pytest.approx(100.0)


def test_lowercase_tokenized_mode_ignores_case_and_splits_on_spaces_only():
    hyps = ["A man rides a horse ."]
    refs = ["a man rides a horse ."]
    assert bleu(hyps, refs).score < 100.0
    tokenized = bleu(hyps, refs, lowercase_tokenized=True)
    assert tokenized.score == pytest.approx(100.0)
    assert "case:lc" in tokenized.signature and "tok:none" in tokenized.signature


def test_a_value_worked_by_hand():
    # "a b c d" against "a b c e": n-gram precisions 3/4, 2/3, 1/2 and 0/1; sacreBLEU's default
    # 'exp' smoothing turns the zero into 1 / (2 * 1). BP = 1. BLEU = (3/4 * 2/3 * 1/2 * 1/2)^(1/4)
    assert bleu(["a b c d"], ["a b c e"]).score == pytest.approx(100 * 0.125**0.25, abs=1e-6)


def test_mismatched_line_counts_are_refused():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        bleu(["a", "b"], ["a"])


def test_tokenized_text_scores_the_same_without_the_detokenize_warning(caplog):
    """The demo scores Multi30k's tokenized variant with 13a too: sacreBLEU would print "forgot to
    detokenize" lines, which a newcomer cannot act on; the score itself is unchanged."""
    import logging

    hypotheses = [f"a dog runs on the grass number {i} ." for i in range(120)]
    references = [f"a dog is running on the grass number {i} ." for i in range(120)]
    with caplog.at_level(logging.WARNING):
        warned = bleu(hypotheses, references)
    assert "tokenized period" in caplog.text  # what `transduce evaluate` prints without the flag
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        quiet = bleu(hypotheses, references, tokenized_text=True)
        bleu(hypotheses, references, lowercase_tokenized=True)
    assert caplog.text == ""
    assert quiet.score == warned.score


def test_text_that_looks_tokenized_gets_a_hint_naming_the_flag_not_sacrebleus_api(caplog):
    """sacreBLEU's own lines tell the reader to pass its `force` parameter, which `transduce
    evaluate` has not got; ours names the flag that scores such text as tokens."""
    import logging

    references = [f"ein hund rennt auf der wiese nummer {i} ." for i in range(150)]
    with caplog.at_level(logging.WARNING):
        bleu(references[:99], references[:99])
    assert caplog.text == ""  # sacreBLEU's threshold: 100 such lines
    with caplog.at_level(logging.WARNING):
        bleu(references[:100], references[:100])
    assert "100 lines end in a tokenized period" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        bleu(references, references)
    assert "150 lines end in a tokenized period" in caplog.text
    assert "--lowercase-tokenized" in caplog.text
    assert "force" not in caplog.text and "forgot" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # detokenized text ends its sentences "wiese."
        detokenized = [line.replace(" .", ".") for line in references]
        bleu(detokenized, detokenized)
    assert caplog.text == ""


def test_chrf_is_sacrebleus_chrf_weighing_recall_over_precision():
    """chrF (beta = 2, characters only, not chrF++): a hypothesis that says less of its
    reference scores lower than one that says more, with the same characters in common."""
    short = chrf(["a dog"], ["a dog runs on the grass"])
    long = chrf(["a dog runs on the grass"], ["a dog"])
    assert short.score < 0.5 * long.score
    assert "nc:6|nw:0" in short.signature and short.name == "chrF"


def test_fewer_hypotheses_than_references_are_refused_too():
    with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
        bleu(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
        chrf(["a"], ["a", "b"])


def test_a_hypothesis_shorter_than_its_reference_pays_the_brevity_penalty():
    # "a b c d" against "a b c d e f": every n-gram matches, BP = exp(1 - 6/4). The other way
    # round, no penalty but precisions 4/6, 3/5, 2/4 and 1/3: the two sides are not symmetric.
    short = bleu(["a b c d"], ["a b c d e f"])
    assert short.score == pytest.approx(100 * math.exp(1 - 6 / 4), abs=1e-6)
    long = bleu(["a b c d e f"], ["a b c d"])
    assert long.score == pytest.approx(100 * (4 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25, abs=1e-6)
    # chrF weighs recall: the hypothesis that says less scores lower
    assert chrf(["a b c d"], ["a b c d e f"]).score < chrf(["a b c d e f"], ["a b c d"]).score


def test_a_score_prints_sacrebleus_line_then_its_signature():
    """What `transduce evaluate` prints for each metric."""
    refs = ["a man rides a horse ."]
    for score, head in ((bleu(refs, refs), "BLEU = 100.00 "), (chrf(refs, refs), "chrF2 = 100.00")):
        assert score.detail.startswith(head)
        assert str(score) == f"{score.detail}\n  signature: {score.signature}"


def test_no_lines_at_all_are_refused_with_a_reason():
    """sacreBLEU itself fails on an empty corpus with an IndexError."""
    for metric in (bleu, chrf):
        with pytest.raises(ValueError, match="no hypotheses to score"):
            metric([], [])
