"""Forced decoding (`decoding/forced.py`, `transduce score`): the model's log-probability of a
target the user gives is the number beam search gives the same target, whatever it is batched
with, for every model family and for an ensemble; and the wiring from files to that number."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from transduce.cli import main
from transduce.config import DecodeConfig, TaskConfig
from transduce.decoding.forced import TargetScore, corpus_perplexity, score_ids
from transduce.decoding.search import beam_search
from transduce.decoding.translate import Translator
from transduce.models.ensemble import Ensemble

from .conftest import (
    BOS,
    EOS,
    PAD,
    PLUMBING_MODEL,
    SpecialIds,
    as_set_arguments,
    reverse_task_files,
    tiny_model,
    tiny_rnn,
    toy_translator,
    toy_vocab,
    write_lines,
)


def _sources(seed: int = 0, n: int = 6) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 7, (n,), generator=generator).tolist()
    return [torch.randint(4, 12, (k,), generator=generator).tolist() for k in lengths]


def _searched(model, sources: list[list[int]], beam: int = 3) -> list[tuple[list[int], float]]:
    """(source, hypothesis tokens, log_prob) for each of the beam's n best of each source."""
    found = []
    for source in sources:
        src = torch.tensor([[*source, EOS]])
        hyps = beam_search(
            model, src, bos=BOS, eos=EOS, pad=PAD, beam_size=beam, n_best=beam, max_len_b=6
        )[0]
        found += [(source, h.tokens, h.log_prob) for h in hyps]
    return found


@pytest.mark.parametrize("family", ["transformer", "rnn", "ensemble"])
def test_a_searched_target_scores_what_beam_search_gave_it(family):
    """The score of each of the beam's n best is its `Hypothesis.log_prob`: the same model
    arithmetic as the cached search, with no length penalty (a wrong shift of the target, a
    missing EOS or a score read at the wrong position would differ)."""
    model = {
        "transformer": lambda: tiny_model(seed=1),
        "rnn": lambda: tiny_rnn(seed=1),
        "ensemble": lambda: Ensemble([tiny_model(seed=1), tiny_rnn(seed=2)]).eval(),
    }[family]()
    found = _searched(model, _sources())
    scores = score_ids(model, SpecialIds(), [(s, t) for s, t, _ in found], torch.device("cpu"))
    for (_, tokens, log_prob), score in zip(found, scores, strict=True):
        assert score.log_prob == pytest.approx(log_prob, abs=1e-5)  # float32 sums, two orders
        assert score.tokens == len(tokens) + 1


def test_scores_do_not_depend_on_what_a_pair_is_batched_with():
    """Padding invariance: pairs scored one at a time, in batches of every size the token budget
    allows, and in reverse order give the same numbers, each in its input's place."""
    model = tiny_model(seed=3)
    sources = _sources(seed=4, n=9)
    targets = [list(reversed(s)) + [5] * (i % 3) for i, s in enumerate(sources)]
    pairs = list(zip(sources, targets, strict=True))
    cpu = torch.device("cpu")
    alone = [score_ids(model, SpecialIds(), [pair], cpu)[0].log_prob for pair in pairs]
    for budget in (1, 12, 30, 10_000):
        together = [
            s.log_prob for s in score_ids(model, SpecialIds(), pairs, cpu, max_tokens=budget)
        ]
        assert together == pytest.approx(alone, abs=1e-12)
    backwards = score_ids(model, SpecialIds(), pairs[::-1], cpu)
    assert [s.log_prob for s in backwards][::-1] == pytest.approx(alone, abs=1e-12)


def test_a_score_is_the_sum_of_the_next_token_log_probabilities_by_hand():
    """log P(y | x) = sum over y's tokens and EOS of log softmax(logits) at the token, from the
    uncached forward pass: the formula itself, on one pair, position by position."""
    model = tiny_model(seed=5)
    source, target = [4, 5, 6], [7, 8]
    logits = model(torch.tensor([[*source, EOS]]), torch.tensor([[BOS, *target]]))[0]
    by_hand = sum(
        torch.log_softmax(logits[t], -1)[token].item() for t, token in enumerate([*target, EOS])
    )
    score = score_ids(model, SpecialIds(), [(source, target)], torch.device("cpu"))[0]
    assert score.log_prob == pytest.approx(by_hand, abs=1e-5)  # log_softmax in float32
    assert score.per_token == pytest.approx(by_hand / 3)


def test_a_model_in_training_mode_is_refused():
    model = tiny_model().train()
    with pytest.raises(ValueError, match="training mode"):
        score_ids(model, SpecialIds(), [([4], [5])], torch.device("cpu"))


def test_corpus_perplexity_weighs_every_subword_the_same():
    scores = [TargetScore(-2.0, 2, 0), TargetScore(-6.0, 6, 0)]
    assert corpus_perplexity(scores) == pytest.approx(math.e)
    assert corpus_perplexity([TargetScore(-1.0, 1, 0), TargetScore(-9.0, 1, 0)]) == pytest.approx(
        math.exp(5.0)
    )


def test_the_translator_scores_text_as_it_translates_it(tmp_path):
    """From text: a translation the translator wrote scores its hypothesis's log_prob (where
    the text encodes back to the same subwords), and one number comes per pair, in order."""
    translator = toy_translator(tmp_path)
    lines = ["the dog runs", "green grass outside", "children playing", "the"]
    decode = DecodeConfig(beam_size=3, n_best=3, max_len_b=5)
    pairs = [
        (line, text, h)
        for line, hyps in zip(lines, translator.hypotheses(lines, decode), strict=True)
        for text, h in hyps
    ]
    round_trips = [p for p in pairs if translator.vocab.encode([p[1]])[0] == p[2].tokens]
    assert len(round_trips) >= 4
    scores = translator.score([p[0] for p in round_trips], [p[1] for p in round_trips])
    for (_, _, hypothesis), score in zip(round_trips, scores, strict=True):
        assert score.log_prob == pytest.approx(hypothesis.log_prob, abs=1e-5)


def test_the_translator_refuses_unequal_lists_and_one_string(tmp_path):
    translator = toy_translator(tmp_path)
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        translator.score(["the dog", "grass"], ["the dog"])
    with pytest.raises(TypeError, match="sources must be a list"):
        translator.score("the dog", ["the dog"])


def test_a_target_too_long_for_learned_positions_is_named(tmp_path):
    vocab = toy_vocab(tmp_path)
    model = tiny_model(vocab_size=vocab.size, positions="learned", max_positions=6)
    translator = Translator(model, vocab, DecodeConfig(), torch.device("cpu"))
    with pytest.raises(ValueError, match=r"target line 2: .* exceed the model's max_positions=6"):
        translator.score(["the", "the"], ["dog", "the dog runs across the green grass"])


@pytest.mark.parametrize("tags", [False, True])
def test_a_parser_scores_a_tree_as_the_linearised_tokens_it_writes(tmp_path, tags):
    """A bracketed tree (from a treebank: function tags and empty elements cleaned away) scores
    as its linearisation, with the POS tags or the placeholder as the model was trained; a tree
    over other words than its sentence is refused, named."""
    from transduce.data.bpe import train_joint

    symbols = ["(S", ")S", "(NP", ")NP", "(VP", ")VP", "XX", "DT", "NN", "VBZ"]
    vocab = train_joint(
        ["the dog runs"] * 5 + [" ".join(symbols)] * 5, 40, tmp_path / "parse", whole_tokens=symbols
    )
    model = tiny_model(seed=6, vocab_size=vocab.size)
    parse = TaskConfig(name="parse", tags=tags)
    translator = Translator(model, vocab, DecodeConfig(), torch.device("cpu"), parse)
    tree = "(S (NP-SBJ (DT the) (NN dog)) (-NONE- *T*-1) (VP (VBZ runs)))"
    linear = {
        False: "(S (NP XX XX )NP (VP XX )VP )S",
        True: "(S (NP DT NN )NP (VP VBZ )VP )S",
    }
    by_tree = translator.score(["the dog runs"], [tree])[0]
    by_ids = [
        score_ids(model, vocab, [tuple(vocab.encode(["the dog runs", text]))], torch.device("cpu"))
        for text in (linear[tags], linear[not tags])
    ]
    assert by_tree == by_ids[0][0] and by_tree.log_prob != by_ids[1][0].log_prob
    assert by_tree.unknown == 0 and by_tree.tokens == 9 + 1  # nine symbols and EOS
    with pytest.raises(ValueError, match="target line 1: a tree over 'the dog runs', but its sen"):
        translator.score(["the cat runs"], [tree])


def cli(*argv) -> None:
    main([str(arg) for arg in argv])


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory) -> Path:
    """A run on the toy reverse task, 10 updates, validated (and saved) at update 10."""
    folder = tmp_path_factory.mktemp("score")
    splits = reverse_task_files(folder, n_train=200)
    files = [f"--{split}-{side}={path}" for split in ("train", "dev")
             for side, path in zip(("src", "tgt"), splits[split], strict=True)]  # fmt: skip
    cli("prepare", "files", "--src", "xx", "--tgt", "yy", *files, "--vocab-size", 16,
        "--out", folder / "data")  # fmt: skip
    settings = PLUMBING_MODEL | {"train.valid_every": 10, "train.valid_bleu": False}
    cli("train", "--data", folder / "data", "--preset", "tiny", "--out", folder / "run",
        "--max-steps", 10, "--set", *as_set_arguments(settings))  # fmt: skip
    return folder


def test_scoring_the_dev_set_gives_the_perplexity_training_logged(toy_run, tmp_path, caplog):
    """The wiring end to end: `transduce score` over the dev files with the checkpoint of the
    last validation reports the dev perplexity the training log holds (the same text, encoded
    the same way, scored by the same model), and its per-line numbers add up to it."""
    run, (dev_src, dev_tgt) = toy_run / "run", (toy_run / "dev.src", toy_run / "dev.tgt")
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    logged = [r for r in records if r["kind"] == "valid"][-1]
    checkpoint = next(run.glob(f"checkpoints/*{logged['step']}*.pt"))
    out = tmp_path / "scores.txt"
    scoring = ["score", "--model", run, "--checkpoint", checkpoint, "--src", dev_src, "--tgt",
               dev_tgt, "--output", out]  # fmt: skip
    with caplog.at_level("INFO", logger="transduce"):
        cli(*scoring)
    sums = [float(x) for x in out.read_text().splitlines()]
    assert len(sums) == len(dev_src.read_text().splitlines()) == 40
    said = next(r.getMessage() for r in caplog.records if "perplexity" in r.getMessage())
    assert float(said.rsplit(" ", 1)[1]) == pytest.approx(logged["ppl"], rel=1e-3)
    subwords = int(said.split(", ")[1].split()[0])
    assert math.exp(-sum(sums) / subwords) == pytest.approx(logged["ppl"], rel=1e-3)
    cli(*scoring, "--per-token")
    means = [float(x) for x in out.read_text().splitlines()]
    assert all(m > s for m, s in zip(means, sums, strict=True))  # a mean of negatives is higher


def test_unreadable_or_unequal_files_are_refused_named(toy_run, tmp_path):
    run, source = toy_run / "run", write_lines(tmp_path / "a.src", ["a b", "c d"])
    target = write_lines(tmp_path / "a.tgt", ["b a"])
    with pytest.raises(SystemExit, match=r"line counts differ: .*a.src has 2 lines, .*a.tgt has 1"):
        cli("score", "--model", run, "--src", source, "--tgt", target)
    target.write_bytes(b"b a\n\xff\xfe\n")
    with pytest.raises(SystemExit, match=r"a.tgt.*line 2: invalid UTF-8"):
        cli("score", "--model", run, "--src", source, "--tgt", target)


def test_targets_the_vocabulary_cannot_spell_are_warned_of(toy_run, tmp_path, caplog, monkeypatch):
    run, source = toy_run / "run", write_lines(tmp_path / "a.src", ["a b", "c d", "e"])
    target = write_lines(tmp_path / "a.tgt", ["b a", "d c ж", "e"])
    monkeypatch.setattr(sys, "stdout", open(tmp_path / "out", "w"))  # noqa: SIM115
    cli("score", "--model", run, "--src", source, "--tgt", target)
    sys.stdout.close()
    assert len((tmp_path / "out").read_text().splitlines()) == 3
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(
        "1 targets hold characters the vocabulary lacks" in w and "line 2" in w for w in warned
    )
