"""Parsing as a task end to end (s6.3): a treebank prepared for training, a model that parses,
trees always over the input's words, and EVALB's numbers from `evaluate --task parse`."""

import logging
import random

import pytest

from transduce.cli import main
from transduce.config import DecodeConfig, TaskConfig, override
from transduce.data.ptb import prepare_treebank
from transduce.data.trees import parse_tree
from transduce.decoding.translate import Translator
from transduce.presets import preset
from transduce.tasks import get_task
from transduce.tasks.parsing import carries_placeholders
from transduce.training.checkpoint import load
from transduce.training.runlog import read_log

from .conftest import PLUMBING_MODEL, as_set_arguments, write_lines

WORDS = {"DT": ["the", "a"], "NN": ["cat", "dog", "mat"], "VBD": ["sat", "saw"], "IN": ["on"]}


def _sentence(rng: random.Random) -> str:
    def word(tag):
        return f"({tag} {rng.choice(WORDS[tag])})"

    subject = f"(NP-SBJ {word('DT')} {word('NN')})"
    place = f"(PP-LOC {word('IN')} (NP {word('DT')} {word('NN')}))"
    verb = f"(VP {word('VBD')} {place if rng.random() < 0.5 else ''})"
    return f"( (S {subject} {verb} (. .)) )"


@pytest.fixture(scope="module")
def treebank(tmp_path_factory):
    """An NLTK-sample layout: files 0001 (train), 0140 (dev) and 0160 (test)."""
    root = tmp_path_factory.mktemp("treebank")
    folder = root / "ptb_sample" / "combined"
    folder.mkdir(parents=True)
    rng = random.Random(0)
    for number, n in ((1, 300), (140, 12), (160, 12)):
        text = "\n".join(_sentence(rng) for _ in range(n))
        (folder / f"wsj_{number:04d}.mrg").write_text(text)
    return root


@pytest.fixture(scope="module")
def prepared(treebank, tmp_path_factory):
    return prepare_treebank(treebank, tmp_path_factory.mktemp("p") / "data", vocab_size=40)


def test_a_prepared_treebank_is_words_in_and_one_piece_per_tree_token_out(prepared):
    assert prepared.task == TaskConfig(name="parse", tags=False)  # XX for every POS tag
    text, split = prepared.text("dev"), prepared.split("dev")
    for i in range(len(split)):
        source, target = split.pair(i)
        assert len(target) == len(text.tgt[i].split())  # "(NP" and ")NP" are one piece each
        assert prepared.vocab.decode([source.tolist()])[0] == text.src[i]
    gold = get_task(prepared.task).references(prepared, "dev")
    assert [parse_tree(g).leaves() for g in gold] == [s.split() for s in text.src]
    assert "-SBJ" not in "".join(gold) and "(S" in gold[0]  # cleaned: no function tags


def test_half_the_training_trees_for_a_learning_curve(treebank, tmp_path):
    half = prepare_treebank(treebank, tmp_path / "half", vocab_size=40, train_fraction=0.5)
    assert len(half.split("train")) == 150 and len(half.split("dev")) == 12


def test_deep_trees_of_few_words_are_trained_on_and_a_fraction_keeps_at_least_one(tmp_path):
    """A linearised tree has several tokens a word, a unary chain many more: translation's
    length filter (9 target tokens a source token at most) would drop it from training."""
    rng = random.Random(1)
    folder = tmp_path / "ptb_sample" / "combined"
    folder.mkdir(parents=True)
    deep = "( (S " + "(VP " * 12 + "(NP (NN cat))" + ")" * 13 + " )"
    for number, n in ((1, 20), (140, 3), (160, 3)):
        text = "\n".join(_sentence(rng) for _ in range(n))
        (folder / f"wsj_{number:04d}.mrg").write_text(text + ("\n" + deep if number == 1 else ""))
    data = prepare_treebank(tmp_path, tmp_path / "data", vocab_size=40)
    train = data.split("train")
    assert len(train) == 21 and max(len(train.pair(i)[1]) for i in range(21)) == 29
    one = prepare_treebank(tmp_path, tmp_path / "one", vocab_size=40, train_fraction=0.01)
    assert len(one.split("train")) == 1
    (tmp_path / "one" / "left by hand").write_text("")
    prepare_treebank(tmp_path, tmp_path / "one", vocab_size=40, train_fraction=0.01, force=True)
    assert not (tmp_path / "one" / "left by hand").exists()  # prepared afresh, not reused
    with pytest.raises(ValueError, match=r"train_fraction must be in \(0, 1\], got 0"):
        prepare_treebank(tmp_path, tmp_path / "none", vocab_size=40, train_fraction=0.0)


def test_train_parse_and_score_with_the_commands(prepared, tmp_path, capsys, caplog, monkeypatch):
    searched, real_translate = [], Translator.translate  # each parse's search settings

    def translate(self, lines, decode=None):
        searched.append(decode)
        return real_translate(self, lines, decode)

    monkeypatch.setattr(Translator, "translate", translate)
    settings = PLUMBING_MODEL | {"train.max_steps": 4, "train.valid_every": 2}
    run = tmp_path / "run"
    main(["-q", "train", "--data", str(prepared.path), "--preset", "parse-tiny", "--out", str(run),
          "--set", *as_set_arguments(settings)])  # fmt: skip
    state = load(run / "average.pt")
    assert '"beam_size": 21' in state["config"] and '"alpha": 0.3' in state["config"]
    assert [r["f1"] >= 0 for r in read_log(run / "log.jsonl") if r["kind"] == "valid"] == [1, 1]
    sentences = write_lines(tmp_path / "in.txt", ["the dog saw a cat .", "a mat sat"])
    out = tmp_path / "trees.txt"
    main(["-q", "parse", "--model", str(run), "--input", str(sentences), "--output", str(out),
          "--beam", "2"])  # fmt: skip
    trees = [parse_tree(line) for line in out.read_text().splitlines()]
    assert [t.leaves() for t in trees] == [
        ["the", "dog", "saw", "a", "cat", "."],
        ["a", "mat", "sat"],
    ]
    caplog.set_level(logging.INFO, logger="transduce")
    main(["parse", "--model", str(run), "--input", str(sentences), "--output", str(out),
          "--beam", "2", "--constrained", "--alpha", "0.5", "--batch-size", "3"])  # fmt: skip
    assert "0 of 2 outputs were repaired" in caplog.text
    plain, constrained = searched[-2:]  # the run's alpha 0.3 unless --alpha names another
    assert (plain.beam_size, plain.alpha, plain.constrained) == (2, 0.3, False)
    assert (constrained.beam_size, constrained.alpha, constrained.batch_size) == (2, 0.5, 3)
    assert constrained.constrained
    assert [parse_tree(line).leaves() for line in out.read_text().splitlines()] == [
        t.leaves() for t in trees
    ]
    gold = write_lines(tmp_path / "gold.txt", get_task(prepared.task).references(prepared, "test"))
    main(["evaluate", "--task", "parse", "--hyp", str(gold), "--ref", str(gold)])
    report = capsys.readouterr().out
    assert "Bracketing FMeasure       = 100.00" in report and "-- len<=40 --" in report


def test_translate_models_refuse_to_parse(tmp_path):
    from transduce.presets import tiny

    assert preset("parse-tiny").model.n_layers == 4 == preset("parse").model.n_layers
    assert preset("parse").model.d_model == 1024
    with pytest.raises(SystemExit, match="was not trained to parse"):
        main(["parse", "--model", "tests/fixtures/legacy_run", "--input", "/dev/null"])
    assert Translator.load("tests/fixtures/legacy_run").task.metric == "bleu"
    assert override(tiny(), {"task.name": "parse"}).task.name == "parse"


def test_evaluate_puts_the_gold_tags_back_only_when_every_output_tag_is_a_placeholder(
    tmp_path, capsys
):
    # "," tagged as a word: with its own tags EVALB deletes the comma from the gold tree alone,
    # so the sentence is an error sentence; all-XX output is given the gold tags instead.
    gold = "(S (NP (DT the) (NN cat)) (, ,) (VP (VBD sat)))"
    predicted = "(S (NP (DT the) (NN cat)) (NN ,) (VP (VBD sat)))"
    placeholders = "(S (NP (XX the) (XX cat)) (XX ,) (VP (XX sat)))"
    ref = write_lines(tmp_path / "gold.txt", [gold])

    def report(hypothesis: str) -> str:
        hyp = write_lines(tmp_path / "hyp.txt", [hypothesis])
        main(["evaluate", "--task", "parse", "--hyp", str(hyp), "--ref", str(ref)])
        return capsys.readouterr().out

    assert "Number of Error sentence  =      1" in report(predicted)
    assert "tags:predicted" in report(predicted)
    scored = report(placeholders)
    assert "Number of Valid sentence  =      1" in scored and "tags:gold" in scored
    assert "Bracketing FMeasure       = 100.00" in scored
    hyp = write_lines(tmp_path / "hyp.txt", [predicted])  # --gold-tags: its own tags replaced
    main(["evaluate", "--task", "parse", "--gold-tags", "--hyp", str(hyp), "--ref", str(ref)])
    assert "tags:gold" in capsys.readouterr().out


def test_an_unreadable_tree_is_named_by_its_side_and_line_and_the_files(tmp_path):
    good = "(S (NP (DT the) (NN cat)) (VP (VBD sat)))"
    ref = write_lines(tmp_path / "gold.txt", [good, good])
    hyp = write_lines(tmp_path / "hyp.txt", [good, "(S (NP (DT the) cat) (VP (VBD sat)))"])
    with pytest.raises(SystemExit, match=r"test tree 2: word outside a preterminal .*hyp\.txt"):
        main(["evaluate", "--task", "parse", "--hyp", str(hyp), "--ref", str(ref)])
    with pytest.raises(SystemExit, match=r"gold tree 2: word outside a preterminal .*--ref"):
        main(["evaluate", "--task", "parse", "--hyp", str(ref), "--ref", str(hyp)])
    broken = write_lines(tmp_path / "broken.txt", [good, "(S (NP (XX the) (XX cat)) (VP (XX sat)"])
    with pytest.raises(SystemExit, match=r"gold tree 2:1: '\(' is never closed .*broken\.txt"):
        main(
            ["evaluate", "--task", "parse", "--gold-tags", "--hyp", str(ref), "--ref", str(broken)]
        )


def test_with_predicted_tags_checkpoints_rank_by_f1_with_the_gold_tags_put_back():
    # EVALB drops a sentence whose punctuation tags differ from the gold ones: checkpoint A,
    # which tags a comma NN and gets that sentence's NP wrong, would score 100 on the other
    # sentence alone and rank above B, which has every tag right and one bracket wrong.
    gold = ["(S (NP (DT the) (NN cat)) (, ,) (VP (VBD sat)))", "(S (NP (PRP it)) (VP (VBD ran)))"]
    a = ["(S (NP (DT the)) (NN cat) (NN ,) (VP (VBD sat)))", "(S (NP (PRP it)) (VP (VBD ran)))"]
    b = ["(S (NP (DT the) (NN cat)) (, ,) (VP (VBD sat)))", "(S (NP (PRP it) (VBD ran)))"]
    task = get_task(TaskConfig(name="parse", tags=True))
    as_evalb = [task.report(hyp, gold)[0] for hyp in (a, b)]  # what `evaluate` prints
    assert as_evalb[0].score == 100.0 > as_evalb[1].score
    assert "Number of Error sentence  =      1" in as_evalb[0].detail
    ranked = [task.score(hyp, gold) for hyp in (a, b)]  # what validation ranks by
    assert ranked[0].score < 100.0 and "Number of Error sentence  =      0" in ranked[0].detail
    assert ranked[0].signature.endswith("tags:predicted, scored with gold")


def test_constrained_search_refuses_a_model_that_writes_tags(treebank, tmp_path):
    tagged = prepare_treebank(treebank, tmp_path / "data", tags=True, vocab_size=60)
    settings = PLUMBING_MODEL | {"train.max_steps": 2, "train.valid_every": 2}
    run = tmp_path / "run"
    main(["-q", "train", "--data", str(tagged.path), "--preset", "parse-tiny", "--out", str(run),
          "--set", *as_set_arguments(settings)])  # fmt: skip
    sentences = write_lines(tmp_path / "in.txt", ["the dog sat"])
    with pytest.raises(SystemExit, match="XX for every tag"):
        main(["parse", "--model", str(run), "--input", str(sentences), "--constrained"])


def test_the_paper_s_parsing_search_beam_21_alpha_0_3_and_input_length_plus_300():
    task = get_task(TaskConfig(name="parse"))
    assert task.decode_defaults() == DecodeConfig(
        beam_size=21, alpha=0.3, max_len_a=1, max_len_b=300
    )
    assert (task.metric, task.higher_is_better) == ("f1", True)


def test_decoded_outputs_become_trees_over_their_sources_words_and_repairs_are_counted(caplog):
    task = get_task(TaskConfig(name="parse", tags=False))
    outputs = ["(S (NP XX XX )NP (VP XX )VP )S", "(S (NP XX )NP", "(S XX XX XX XX )S"]
    sources = ["the cat sat", "a dog ran", "it ran"]
    caplog.set_level(logging.INFO, logger="transduce")
    assert task.postprocess(outputs, sources) == [
        "(S (NP (XX the) (XX cat)) (VP (XX sat)))",
        "(S (NP (XX a)) (XX dog) (XX ran))",  # closed at the end, missing words appended
        "(S (XX it) (XX ran))",  # preterminals beyond the words dropped
    ]
    assert task.repaired == 2 and "repaired 2 of 3 parses into trees" in caplog.text
    with pytest.raises(ValueError):  # one output for each source sentence, no fewer
        task.postprocess(outputs[:2], sources)


def test_a_model_without_tags_gets_placeholders_and_one_with_tags_keeps_its_own():
    output, source = ["(S (NP DT NN )NP (VP VBD )VP )S"], ["the cat sat"]
    untagged = get_task(TaskConfig(name="parse", tags=False)).postprocess(output, source)
    assert untagged == ["(S (NP (XX the) (XX cat)) (VP (XX sat)))"]
    tagged = get_task(TaskConfig(name="parse", tags=True)).postprocess(output, source)
    assert tagged == ["(S (NP (DT the) (NN cat)) (VP (VBD sat)))"]
    assert carries_placeholders(untagged) and not carries_placeholders(tagged)
    assert not carries_placeholders(["(S (NP (XX the) (NN cat)) (VP (XX sat)))"])  # not every
    assert not carries_placeholders([])  # no preterminal at all: nothing says which tags


def test_the_references_are_the_gold_trees_of_the_split_asked_for(prepared):
    task = get_task(prepared.task)
    for split in ("dev", "test"):
        gold = task.references(prepared, split)
        assert [parse_tree(g).leaves() for g in gold] == [
            s.split() for s in prepared.text(split).src
        ]
    assert task.references(prepared, "dev") != task.references(prepared, "test")


def test_the_score_is_f1_over_every_sentence_and_zero_when_no_bracket_matched():
    task = get_task(TaskConfig(name="parse", tags=False))
    long = "(S (NP " + "(XX a) " * 41 + ") (VP (XX b)))"  # past EVALB's len<=40 cut
    gold_long = "(S (NP " + "(NN a) " * 41 + ") (VP (VB b)))"
    flat = "(S (XX it) (XX ran))"  # 1 of the 3 gold brackets; the long one matches all 3
    score = task.score([long, flat], [gold_long, "(S (NP (PRP it)) (VP (VBD ran)))"])
    # recall 4/6, precision 4/4: F1 80 (the short sentence alone would give 50)
    assert score.name == "F1" and score.score == pytest.approx(80.0)
    # recall counts the gold brackets found: the references are the gold side
    assert "Recall         =  66.67\nBracketing Precision      = 100.00\n" in score.detail
    tagged, flat_tagged = get_task(TaskConfig(name="parse", tags=True)), "(S (PRP it) (VBD ran))"
    printed = tagged.report(
        [gold_long, flat_tagged], [gold_long, "(S (NP (PRP it)) (VP (VBD ran)))"]
    )
    assert printed[0].score == pytest.approx(80.0)  # what `evaluate` prints: F1 too, not recall
    assert task.score(["(S (. .))"], ["(S (. .))"]).score == 0.0  # EVALB's -nan, ranked as 0
