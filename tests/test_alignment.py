"""Word alignments from cross attention and AER: argmax over source words of the chosen layer's
head-averaged map, BOS/EOS left out, Pharaoh lines one per input line; AER worked by hand."""

import pytest
import torch

import transduce.viz.alignment as alignment
from transduce.cli import main
from transduce.viz.alignment import (
    GoldAlignment,
    aer,
    aer_of_files,
    align,
    default_layer,
    parse_gold,
    pharaoh,
    translate_with_alignments,
)
from transduce.viz.capture import SentenceAttention

from .conftest import save_toy_model, tiny_rnn, toy_translator, write_lines
from .fakes import ScriptedSeq2Seq


def test_aer_on_a_hand_worked_example():
    # S = {0-0, 1-1}, P = S + {1-2}; A = {0-0, 1-2, 2-2}: |A&S| = 1, |A&P| = 2, |A| = 3, |S| = 2
    gold = parse_gold("0-0 1-1 1?2")
    assert gold == GoldAlignment({(0, 0), (1, 1)}, {(0, 0), (1, 1), (1, 2)})
    assert aer([{(0, 0), (1, 2), (2, 2)}], [gold]) == pytest.approx(1 - 3 / 5)
    assert aer([{(0, 0), (1, 1)}], [gold]) == 0.0  # all sure links, nothing else
    assert aer([{(1, 2)}], [gold]) == pytest.approx(1 - 1 / 3)  # a possible link only
    # a corpus sums the counts: (1 + 2 + 2 + 2) / (3 + 2 + 2 + 2), not the mean of the two rates
    two = aer([{(0, 0), (1, 2), (2, 2)}, {(0, 1), (1, 0)}], [gold, parse_gold("0-1 1-0")])
    assert two == pytest.approx(1 - 7 / 9)


def test_possible_links_may_be_written_with_p_as_well():
    assert parse_gold("0-0 1p2 2?1") == GoldAlignment({(0, 0)}, {(0, 0), (1, 2), (2, 1)})


def test_bad_gold_links_are_named():
    with pytest.raises(ValueError, match=r"gold\.txt:3: not an alignment link: '0:1'"):
        parse_gold("0-0 0:1", "gold.txt:3")
    with pytest.raises(ValueError, match="not an alignment link: '0-1x'"):
        parse_gold("0-1x")


def test_aer_of_files_reads_what_translate_writes_and_names_unequal_files(tmp_path):
    hyp = write_lines(tmp_path / "hyp.txt", ["ein hund ||| 0-0 1-1", "1-0"])
    gold = write_lines(tmp_path / "gold.txt", ["0-0 1-1", "0-0 1?0"])
    assert aer_of_files(hyp, gold) == pytest.approx(1 - (2 + 3) / (3 + 3))
    short = write_lines(tmp_path / "short.txt", ["0-0 1-1"])
    with pytest.raises(ValueError, match=r"hyp\.txt has 2 lines but .*short\.txt has 1"):
        aer_of_files(hyp, short)


def test_aer_of_no_links_against_none_is_zero_and_of_unequal_corpora_an_error():
    assert aer([set(), set()], [parse_gold(""), parse_gold("")]) == 0.0
    with pytest.raises(ValueError, match="2 hypothesis lines but 1 gold lines"):
        aer([set(), set()], [parse_gold("0-0")])


def _attention(layers: list[torch.Tensor], target: list[str], source: list[str]):
    return SentenceAttention("s", "t", {"cross": layers}, {"cross": (target, source)})


def test_each_target_word_takes_its_argmax_source_word_without_eos():
    # heads (2) averaged; rows: target words + </s>; columns: source words + </s>
    head_0 = torch.tensor([[0.1, 0.7, 0.2], [0.5, 0.1, 0.4], [0.2, 0.2, 0.6]])
    head_1 = torch.tensor([[0.3, 0.3, 0.4], [0.1, 0.2, 0.7], [0.3, 0.3, 0.4]])
    found = align(
        _attention([torch.stack([head_0, head_1])], ["x", "y", "</s>"], ["a", "b", "</s>"])
    )
    # row 1 averages to [0.3, 0.15, 0.55]: </s> is largest but takes no part, so "a"
    assert found == [(1, 0), (0, 1)]
    assert pharaoh(found) == "0-1 1-0"
    # the first head alone would say "a"; the mean of the two says "b"
    split = torch.tensor([[[0.6, 0.4, 0.0]], [[0.0, 1.0, 0.0]]])
    assert align(_attention([split], ["x"], ["a", "b", "</s>"])) == [(1, 0)]


def test_words_are_numbered_as_split_numbers_them():
    # a lone "▁" piece (a run of spaces) merges into an empty word, which str.split() skips
    weights = torch.tensor([[[0.1, 0.8, 0.1, 0.0], [0.5, 0.1, 0.3, 0.1], [0.5, 0.5, 0.0, 0.0]]])
    found = align(_attention([weights], ["", "y", "</s>"], ["", "a", "b", "</s>"]))
    assert found == [(1, 0)]  # "y" is word 0 and weighs "b" (word 1) over "a"; "" takes no part


def test_the_default_layer_is_the_penultimate():
    first = torch.tensor([[[1.0, 0.0, 0.0]]])  # (h=1, 1 target word, 2 source words + </s>)
    second = torch.tensor([[[0.0, 1.0, 0.0]]])
    third = torch.tensor([[[1.0, 0.0, 0.0]]])
    attention = _attention([first, second, third], ["x"], ["a", "b", "</s>"])
    assert default_layer(3) == 1 and default_layer(1) == 0
    assert align(attention) == [(1, 0)]
    assert align(attention, layer=0) == [(0, 0)]
    assert align(attention, layer=-1) == align(attention, layer=2) == [(0, 0)]  # from the end
    for outside in (3, -4):
        with pytest.raises(ValueError, match="out of range"):
            align(attention, layer=outside)


@pytest.mark.parametrize("family", ["transformer", "rnn", "scripted"])
def test_alignments_have_a_line_per_input_and_only_pairs_in_range(family, tmp_path):
    models = {"scripted": ScriptedSeq2Seq(vocab_size=60, seed=1), "rnn": tiny_rnn(vocab_size=60)}
    translator = toy_translator(tmp_path, model=models.get(family))
    lines = ["the children playing outside", "", "dog runs across green grass"]
    results = translate_with_alignments(translator, lines)
    assert len(results) == len(lines)
    assert [text for text, _ in results] == [hyps[0][0] for hyps in translator.translate(lines)]
    for line, (text, pairs) in zip(lines, results, strict=True):
        assert all(0 <= i < len(line.split()) and 0 <= j < len(text.split()) for i, j in pairs)
        assert sorted(j for _, j in pairs) == list(range(len(text.split())))  # one link a word


def test_the_layer_asked_for_is_the_one_aligned_with(tmp_path, monkeypatch):
    translator, real, asked = toy_translator(tmp_path), alignment.align, []

    def spy(attention, layer=None):
        asked.append(layer)
        return real(attention, layer)

    monkeypatch.setattr(alignment, "align", spy)
    translate_with_alignments(translator, ["the dog runs", "children playing"], layer=0)
    assert asked == [0, 0]


def test_the_translate_verb_hands_the_layer_and_the_search_to_the_aligner(tmp_path, monkeypatch):
    model, real, asked = save_toy_model(tmp_path), alignment.translate_with_alignments, []

    def spy(translator, lines, layer=None, decode=None, prefixes=None):
        asked.append((layer, decode.beam_size, decode.max_len_b, prefixes))
        return real(translator, lines, layer, decode, prefixes)

    monkeypatch.setattr(alignment, "translate_with_alignments", spy)
    source = write_lines(tmp_path / "in.txt", ["the dog runs"])
    prefix = write_lines(tmp_path / "prefix.txt", ["green"])
    main(["translate", "--model", str(model), "--input", str(source), "--alignments",
          "--alignment-layer", "0", "--beam", "1", "--max-len-b", "3"])  # fmt: skip
    main(["translate", "--model", str(model), "--input", str(source), "--alignments",
          "--beam", "1", "--prefix", str(prefix)])  # fmt: skip
    assert asked == [(0, 1, 3, None), (None, 1, 50, ["green"])]


def test_the_translate_and_evaluate_verbs_write_and_score_pharaoh(tmp_path, capsys):
    model = save_toy_model(tmp_path)
    source = write_lines(tmp_path / "in.txt", ["the dog runs", "", "children playing outside"])
    main(["translate", "--model", str(model), "--input", str(source), "--alignments"])
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 3 and all(" ||| " in line for line in printed)
    links = tmp_path / "links.txt"
    main(["translate", "--model", str(model), "--input", str(source), "--alignments-out",
          str(links), "--output", str(tmp_path / "out.txt")])  # fmt: skip
    assert links.read_text().splitlines() == [line.split(" ||| ")[1] for line in printed]
    assert (tmp_path / "out.txt").read_text().splitlines() == [
        line.split(" ||| ")[0] for line in printed
    ]
    with pytest.raises(SystemExit, match="best translation only; leave out --n-best"):
        main(["translate", "--model", str(model), "--input", str(source), "--alignments",
              "--beam", "2", "--n-best", "2"])  # fmt: skip
    hyp = write_lines(tmp_path / "hyp.txt", ["0-0 1-2 2-2", "0-1 1-0"])
    gold = write_lines(tmp_path / "gold.txt", ["0-0 1-1 1?2", "0-1 1-0"])
    main(["evaluate", "--alignments", "--hyp", str(hyp), "--ref", str(gold)])
    assert capsys.readouterr().out == f"AER = {100 * (1 - 7 / 9):.2f}\n"
