"""Treebank trees (transduce.data.trees, .linearize, .ptb): read, clean, write, linearise."""

from __future__ import annotations

import random

import pytest

from transduce.data.linearize import linearize, restore, substitute_tags
from transduce.data.ptb import read_sample, read_treebank, read_wsj
from transduce.data.trees import (
    Tree,
    TreeFormatError,
    clean,
    parse_tree,
    parse_trees,
    read_mrg,
    strip_function_tags,
    to_string,
    unwrap,
)

MRG = """\
( (S
    (NP-SBJ-1 (NNP Mr.) (NNP Vinken) )
    (VP (VBZ is)
      (NP-PRD (NN chairman) )
      (SBAR (-NONE- 0)
        (S (-NONE- *T*-2) )))
    (. .) ))
(TOP (FRAG (-LRB- -LRB-) (NP=3 (NN Note) ) (-RRB- -RRB-) ))
"""


def test_reader_keeps_every_tree_as_written_and_writer_gives_one_line():
    raw = parse_trees(MRG)
    assert [t.label for t in raw] == ["", "TOP"]
    assert to_string(raw[1]) == "(TOP (FRAG (-LRB- -LRB-) (NP=3 (NN Note)) (-RRB- -RRB-)))"
    assert parse_trees(" ".join(to_string(t) for t in raw)) == raw
    line = "(S (NP (DT the) (NN cat)) (VP (VBD sat)) (. .))"
    assert to_string(parse_tree(line)) == line == str(parse_tree(line))


def test_clean_drops_wrapper_empty_elements_and_function_tags():
    first, second = (clean(t) for t in parse_trees(MRG))
    assert (
        to_string(first) == "(S (NP (NNP Mr.) (NNP Vinken)) (VP (VBZ is) (NP (NN chairman))) (. .))"
    )
    assert to_string(second) == "(FRAG (-LRB- -LRB-) (NP (NN Note)) (-RRB- -RRB-))"
    assert first.pos()[:2] == [("Mr.", "NNP"), ("Vinken", "NNP")]
    assert clean(parse_tree("( (S (-NONE- *)))")) is None


@pytest.mark.parametrize(
    ("label", "stripped"),
    [
        ("NP-SBJ-1", "NP"),
        ("PP-LOC=2", "PP"),
        ("NP=2", "NP"),
        ("S-TPC-1", "S"),
        ("PRP$", "PRP$"),
        ("-LRB-", "-LRB-"),
        ("-RRB-", "-RRB-"),
        ("-NONE-", "-NONE-"),
        ("``", "``"),
        ("=2", "=2"),  # no category before the mark: nothing to strip
        ("-", "-"),
    ],
)
def test_strip_function_tags(label, stripped):
    assert strip_function_tags(label) == stripped


def test_tags_lose_their_function_tags_too_and_a_lone_word_is_no_wrapper():
    tagged = clean(parse_tree("(S (NP-SBJ (NN-HL dog)) (VP (VBZ barks)))"))
    assert to_string(tagged) == "(S (NP (NN dog)) (VP (VBZ barks)))"
    lone = Tree("TOP", ("dog",))  # a preterminal labelled as a wrapper is no wrapper
    assert unwrap(lone) == lone


def test_an_empty_element_beside_the_sentence_leaves_no_wrapper():
    # empty elements go before the wrapper is judged: one tree left inside it is no TOP bracket
    tree = clean(parse_tree("( (S (NP-SBJ (NN dog)) (VP (VBZ barks))) (-NONE- *T*-1))"))
    assert to_string(tree) == "(S (NP (NN dog)) (VP (VBZ barks)))"


def test_wrapper_around_several_trees_is_kept_as_top():
    tree = clean(parse_tree("( (NP (NN a)) (. .))"))
    assert to_string(tree) == "(TOP (NP (NN a)) (. .))"
    assert to_string(clean(parse_tree("(ROOT (S (VB go)))"))) == "(S (VB go))"


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("(S (NN a))\n(S (NN b)\n", 2, "never closed"),
        ("(S (NN a))\n\n(S (NN b)))\n", 3, "expected '\\('"),
        ("(S\n (NP a (NN b)))\n", 2, "only child"),
        ("(S (NP ) (NN b))\n", 1, "no children"),
        ("(S (NN a))\n(S (", 2, "never closed"),  # the file ends after a bracket
    ],
)
def test_bad_files_name_file_and_line(tmp_path, text, line, problem):
    path = tmp_path / "wsj_0001.mrg"
    path.write_text(text)
    with pytest.raises(TreeFormatError, match=rf"wsj_0001\.mrg:{line}: .*{problem}"):
        read_mrg(path)


def test_one_tree_is_asked_for_and_two_are_refused():
    with pytest.raises(TreeFormatError, match="expected one tree, found 2"):
        parse_tree("(S (NN a)) (S (NN b))")


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.mrg"
    path.write_bytes(b"(S (NN a))\n(S (NN b))\n(S (NN \xff))\n")
    with pytest.raises(TreeFormatError, match=r"bad\.mrg:3: invalid UTF-8"):
        read_mrg(path)


JOHN = parse_tree("(S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .))")


def test_linearize_as_vinyals():
    assert " ".join(linearize(JOHN)) == "(S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S"
    assert " ".join(linearize(JOHN, tags=False)) == "(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S"


def placeholders(tree: Tree) -> Tree:
    if tree.is_preterminal():
        return Tree("XX", tree.children)
    return Tree(tree.label, tuple(placeholders(c) for c in tree.children))


def assert_restores(tree: Tree) -> None:
    words = tree.leaves()
    assert restore(linearize(tree), words) == (tree, False)
    assert restore(linearize(tree, tags=False), words, tags=False) == (placeholders(tree), False)


def test_linearize_then_restore_gives_the_tree_back():
    assert_restores(JOHN)
    assert_restores(clean(parse_trees(MRG)[1]))
    assert_restores(parse_tree("(S (VP (VP (VB go))))"))


def assert_well_formed(tree: Tree, words: list[str]) -> None:
    def check(node: Tree) -> None:
        assert node.children and node.label
        if not node.is_preterminal():
            assert all(isinstance(c, Tree) for c in node.children)
            for child in node.children:
                check(child)

    check(tree)
    assert tree.leaves() == words


WORDS = ["John", "has", "a", "dog", "."]


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ("(S (NP NNP )NP )NP )S (VP VBZ DT NN . )VP", None),  # stray closers
        (
            "(S (NP NNP (VP VBZ (NP DT NN",
            "(S (NP (NNP John) (VP (VBZ has) (NP (DT a) (NN dog)))) (XX .))",
        ),
        (
            "(S (NP NNP )NP (VP VBZ )VP )S",
            "(S (NP (NNP John)) (VP (VBZ has)) (XX a) (XX dog) (XX .))",
        ),
        ("(S NN NN NN NN NN NN NN )S", "(S (NN John) (NN has) (NN a) (NN dog) (NN .))"),
        ("", "(S (XX John) (XX has) (XX a) (XX dog) (XX .))"),
        (
            "(NP NN NN )NP (VP NN NN NN )VP",
            "(S (NP (NN John) (NN has)) (VP (NN a) (NN dog) (NN .)))",
        ),
        ("(S (NP )NP NN NN NN NN NN )S", "(S (NN John) (NN has) (NN a) (NN dog) (NN .))"),
        (")S )S (S NN NN NN NN NN )VP", "(S (NN John) (NN has) (NN a) (NN dog) (NN .))"),
        # one defect each: a closer of another label, a root never closed
        ("(S (NP NN )VP NN NN NN NN )S", "(S (NP (NN John)) (NN has) (NN a) (NN dog) (NN .))"),
        ("(S NN NN NN NN NN", "(S (NN John) (NN has) (NN a) (NN dog) (NN .))"),
    ],
)
def test_restore_repairs_malformed_sequences(tokens, expected):
    tree, repaired = restore(tokens.split(), WORDS)
    assert repaired
    assert_well_formed(tree, WORDS)
    if expected:
        assert to_string(tree) == expected


def test_restore_always_gives_a_tree_over_the_words():
    rng = random.Random(0)
    vocabulary = ["(S", "(NP", "(VP", ")S", ")NP", ")VP", ")", "NN", "XX"]
    for _ in range(500):
        words = [f"w{i}" for i in range(rng.randint(1, 6))]
        tokens = [rng.choice(vocabulary) for _ in range(rng.randint(0, 14))]
        for tags in (True, False):
            tree, _ = restore(tokens, words, tags=tags)
            assert_well_formed(tree, words)


def test_a_placeholder_tree_gets_the_gold_tags_when_the_words_line_up():
    """EVALB then deletes the same punctuation on both sides; the gold's empty elements
    (-NONE-) have no word in the sentence and take no place."""
    gold = parse_tree(
        "(S (NP (NNP John)) (VP (VBZ has) (NP (-NONE- *T*)) (NP (DT a) (NN dog))) (. .))"
    )
    test = parse_tree("(S (NP (XX John) (XX has)) (VP (XX a) (XX dog)) (XX .))")
    expected = "(S (NP (NNP John) (VBZ has)) (VP (DT a) (NN dog)) (. .))"
    assert to_string(substitute_tags(test, gold)) == expected
    fewer = parse_tree("(S (XX John) (XX has))")  # words do not line up: left as it is
    assert substitute_tags(fewer, gold) == fewer


def test_restore_needs_words():
    with pytest.raises(ValueError, match="at least one word"):
        restore(["(S", ")S"], [])


def write_corpus(root, names):
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"( (S (NN {path.stem}) (-NONE- *)))\n")


def test_sample_split_by_file_number(tmp_path):
    names = [f"ptb_sample/combined/wsj_{n:04d}.mrg" for n in (1, 139, 140, 159, 160, 179, 180)]
    write_corpus(tmp_path, names)
    splits = read_treebank(tmp_path)
    assert {k: [t.leaves()[0] for t in v] for k, v in splits.items()} == {
        "train": ["wsj_0001", "wsj_0139"],
        "dev": ["wsj_0140", "wsj_0159"],
        "test": ["wsj_0160", "wsj_0179"],
    }
    assert splits == read_sample(tmp_path)


def test_wsj_split_by_section(tmp_path):
    sections = (0, 1, 2, 21, 22, 23, 24)
    names = [f"wsj/{s:02d}/wsj_{s:02d}{n:02d}.mrg" for s in sections for n in (0, 99)]
    write_corpus(tmp_path, [*names, "wsj/23/wsj_0250.mrg"])  # the last one in the wrong folder
    # a tree of empty elements only is no tree once they are gone
    (tmp_path / "wsj/22/wsj_2250.mrg").write_text("( (-NONE- *T*))\n( (S (NN wsj_2250)))\n")
    splits = read_treebank(tmp_path)
    assert splits == read_wsj(tmp_path)
    assert {k: [t.leaves()[0] for t in v] for k, v in splits.items()} == {
        "train": ["wsj_0200", "wsj_0299", "wsj_2100", "wsj_2199"],
        "dev": ["wsj_2200", "wsj_2250", "wsj_2299"],
        "test": ["wsj_2300", "wsj_2399"],
    }
    assert str(splits["dev"][0]) == "(S (NN wsj_2200))"


def test_missing_corpus_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither"):
        read_treebank(tmp_path)
    write_corpus(tmp_path, ["ptb_sample/combined/wsj_0001.mrg"])
    with pytest.raises(FileNotFoundError, match="dev split"):
        read_sample(tmp_path)


@pytest.mark.realdata
def test_every_sample_tree_survives_linearize_and_restore(data_dir):
    splits = read_sample(data_dir)
    assert {k: len(v) for k, v in splits.items()} == {"train": 3068, "dev": 328, "test": 273}
    for trees in splits.values():
        for tree in trees:
            assert_restores(tree)
            assert "-NONE-" not in str(tree) and "-SBJ" not in str(tree)


def test_a_bare_closer_closes_its_bracket_without_counting_as_a_repair():
    """`)` without a label closes the innermost bracket as `)NP` would: the tree is well formed,
    so it is not counted among the repaired outputs; a wrong label is."""
    tree, repaired = restore(["(S", "(NP", "NN", ")", "VBZ", ")"], ["dog", "runs"])
    assert tree == parse_tree("(S (NP (NN dog)) (VBZ runs))")
    assert not repaired
    _, repaired = restore(["(S", "(NP", "NN", ")VP", "VBZ", ")S"], ["dog", "runs"])
    assert repaired
