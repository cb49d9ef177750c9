"""Forced prefixes (`decoding/prefix.py`, `translate --prefix`): every output starts with its
line's prefix, the search's best completion of it, scored as forced decoding scores the whole."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from transduce.cli import main
from transduce.config import DecodeConfig, TaskConfig
from transduce.decoding.forced import score_ids
from transduce.decoding.sampling import Sampling, sample
from transduce.decoding.search import beam_search, greedy_search, length_penalty
from transduce.decoding.translate import Translator

from .conftest import (
    EOS,
    PAD,
    SENTENCES,
    SPECIALS,
    SpecialIds,
    padded_sources,
    save_toy_model,
    tiny_model,
    tiny_rnn,
    toy_translator,
    write_lines,
)

CPU = torch.device("cpu")


def _sources() -> tuple[torch.Tensor, list[list[int]]]:
    """Four sentences of different lengths, padded, and a prefix each: two tokens, none, five
    (longer than the length limit of the tests below), one."""
    src = padded_sources(SENTENCES)
    return src, [[7, 9], [], [5, 4, 11, 6, 8], [9]]


def _decode(kind: str, model, src, prefixes, **limits):
    """Each sentence's outputs (all of them: the beam's n best, the samples) as Hypothesis-like
    (tokens, log_prob) pairs."""
    if kind == "greedy":
        found = greedy_search(model, src, **SPECIALS, prefixes=prefixes, **limits)
        pairs = list(zip(_source_ids(src), found, strict=True))
        scores = score_ids(model, SpecialIds(), pairs, CPU)
        return [[(tokens, score.log_prob)] for tokens, score in zip(found, scores, strict=True)]
    if kind == "beam":
        found = beam_search(model, src, **SPECIALS, beam_size=3, n_best=3, prefixes=prefixes,
                            **limits)  # fmt: skip
    else:
        found = sample(model, src, Sampling(samples=3, seed=1), **SPECIALS, prefixes=prefixes,
                       **limits)  # fmt: skip
    return [[(h.tokens, h.log_prob) for h in hyps] for hyps in found]


def _source_ids(src) -> list[list[int]]:
    return [[int(t) for t in row if t not in (PAD, EOS)] for row in src]


@pytest.mark.parametrize("kind", ["beam", "greedy", "sampling"])
@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_every_output_starts_with_its_prefix_and_scores_as_forced_decoding(kind, family):
    """The beam's n best, greedy's best and every sample begin with their own sentence's prefix,
    even one longer than the length limit (raised to the prefix and its EOS), and their
    log-probability is the model's of the whole output, prefix included."""
    model = tiny_model(seed=3) if family == "transformer" else tiny_rnn(seed=3)
    src, prefixes = _sources()
    found = _decode(kind, model, src, prefixes, max_len_b=3)
    for source, prefix, outputs in zip(_source_ids(src), prefixes, found, strict=True):
        assert outputs
        for tokens, log_prob in outputs:
            assert tokens[: len(prefix)] == prefix, (prefix, tokens)
            assert len(tokens) <= max(len(source) + 3, len(prefix) + 1) - 1
            forced = score_ids(model, SpecialIds(), [(source, tokens)], CPU)[0].log_prob
            assert log_prob == pytest.approx(forced, rel=1e-6)  # search sums in float32
    long_prefix = prefixes[2]  # five tokens, over the limit of 2 + 3: the prefix and EOS
    assert all(tokens == long_prefix for tokens, _ in found[2])


def test_a_wide_beam_finds_the_exhaustive_best_completion():
    """Over a vocabulary of three writable tokens, every completion of the prefix [5, 4] of at
    most two more tokens ends in the n best once, scored as teacher forcing scores it, and the
    best is the exhaustive best: the prefix's tokens count in every score."""
    model, source, prefix = tiny_model(5, vocab_size=6), [4, 5], [5, 4]
    src = torch.tensor([[*source, EOS]])
    completions = [list(t) for n in range(3) for t in itertools.product([1, 4, 5], repeat=n)]
    candidates = [prefix + c for c in completions]
    teacher = dict(zip(map(tuple, candidates),
                       (s.log_prob for s in score_ids(model, SpecialIds(),
                                                      [(source, c) for c in candidates], CPU)),
                       strict=True))  # fmt: skip

    def score(tokens):
        return teacher[tuple(tokens)] / length_penalty(len(tokens) + 1, 0.6)

    found = beam_search(model, src, **SPECIALS, beam_size=27, n_best=27, alpha=0.6, max_len_a=0,
                        max_len_b=5, prefixes=[prefix])[0]  # fmt: skip
    assert sorted(h.tokens for h in found) == sorted(candidates)
    assert found[0].tokens == max(candidates, key=score)
    for hypothesis in found:
        assert hypothesis.log_prob == pytest.approx(teacher[tuple(hypothesis.tokens)])
        assert hypothesis.score == pytest.approx(score(hypothesis.tokens))


@pytest.mark.parametrize("kind", ["beam", "greedy"])
def test_a_batch_decodes_as_each_sentence_alone_with_its_prefix(kind):
    """Prefixes of different lengths in one batch: rows leave it and are reordered while some
    are still inside their prefix; each sentence gets what it gets alone."""
    model = tiny_model(seed=4)
    src, prefixes = _sources()
    together = _decode(kind, model, src, prefixes, max_len_b=4)
    for i, prefix in enumerate(prefixes):
        alone_src = src[i : i + 1, : int((src[i] != PAD).sum())]
        alone = _decode(kind, model, alone_src, [prefix], max_len_b=4)[0]
        assert [t for t, _ in together[i]] == [t for t, _ in alone]
        assert [s for _, s in together[i]] == pytest.approx([s for _, s in alone])


def test_no_prefix_and_an_empty_one_change_nothing_and_greedy_keeps_its_own_start():
    model = tiny_model(seed=6)
    src, _ = _sources()
    plain = beam_search(model, src, **SPECIALS, beam_size=3, n_best=3, max_len_b=4)
    empty = beam_search(model, src, **SPECIALS, beam_size=3, n_best=3, max_len_b=4,
                        prefixes=[[] for _ in range(len(src))])  # fmt: skip
    assert plain == empty
    # Greedy forced along its own first two tokens takes the same path.
    best = greedy_search(model, src, **SPECIALS, max_len_b=4)
    assert greedy_search(model, src, **SPECIALS, max_len_b=4,
                         prefixes=[tokens[:2] for tokens in best]) == best  # fmt: skip


def test_a_forced_start_changes_the_completion():
    """The prefix is not pasted before the unconstrained output: what follows is decoded after
    it (a model's best after another first token need not be its own best's tail)."""
    model = tiny_model(seed=7)
    src, _ = _sources()
    own = greedy_search(model, src, **SPECIALS, max_len_b=6)
    other_first = [[(tokens[0] + 1 - 4) % 8 + 4] if tokens else [4] for tokens in own]
    forced = greedy_search(model, src, **SPECIALS, max_len_b=6, prefixes=other_first)
    assert any(f[1:] != o[1:] for f, o in zip(forced, own, strict=True))


def test_search_refuses_a_prefix_count_that_does_not_match_or_a_tree_constraint_too():
    model, (src, prefixes) = tiny_model(seed=1), _sources()
    with pytest.raises(ValueError, match="3 prefixes for 4 sentences"):
        beam_search(model, src, **SPECIALS, prefixes=prefixes[:3])
    with pytest.raises(ValueError, match="constrained parsing"):
        greedy_search(model, src, **SPECIALS, prefixes=prefixes, constraint=object())


# --- text: Translator, the command line ---


def test_translations_start_with_the_prefix_text(tmp_path):
    translator = toy_translator(tmp_path)
    lines = ["the dog runs", "green grass", "children playing outside"]
    prefixes = ["the green", "", "playing children"]
    decode = replace(translator.decode, n_best=2)
    found = translator.translate(lines, decode, prefixes=prefixes)
    for prefix, outputs in zip(prefixes, found, strict=True):
        assert len(outputs) == 2
        assert all(text.startswith(prefix) for text, _ in outputs)
    assert found[1] == translator.translate(lines[1:2], decode)[0]
    # a sample too, and an empty line still translates to '' whatever its prefix
    sampling = Sampling(seed=3)
    sampled = translator.translate(["dog", ""], sampling=sampling, prefixes=["grass", "dog"])
    assert sampled[0][0][0].startswith("grass") and sampled[1] == [("", 0.0)]


def test_bad_prefixes_are_refused_by_name(tmp_path):
    translator = toy_translator(tmp_path)
    with pytest.raises(ValueError, match="1 prefixes for 2 lines"):
        translator.translate(["the dog", "grass"], prefixes=["the"])
    with pytest.raises(ValueError, match="prefix 2: the model's vocabulary lacks '☃'"):
        translator.translate(["the dog", "grass"], prefixes=["the", "a ☃"])
    with pytest.raises(TypeError, match="prefixes must be a list"):
        translator.translate(["the dog"], prefixes="the")
    parser = Translator(translator.model, translator.vocab, translator.decode, CPU,
                        TaskConfig(name="parse"))  # fmt: skip
    with pytest.raises(ValueError, match="a prefix is for translation, not for a parse model"):
        parser.translate(["the dog"], prefixes=["(S"])
    learned = tiny_model(vocab_size=translator.vocab.size, positions="learned", max_positions=6)
    short = Translator(learned, translator.vocab, translator.decode, CPU)
    too_long = r"line 1: its prefix may take .* past the model's max_positions=6"
    with pytest.raises(ValueError, match=too_long):
        short.translate(["dog"], prefixes=["the dog runs across the green grass"])


def test_the_command_line_forces_each_lines_prefix(tmp_path, capsys):
    model = save_toy_model(tmp_path)
    source = write_lines(tmp_path / "in.txt", ["the dog runs", "grass", "children playing"])
    prefix = write_lines(tmp_path / "prefix.txt", ["the green", "", "outside"])
    out = tmp_path / "out.txt"
    base = ["translate", "--model", str(model), "--input", str(source), "--beam", "2"]
    main([*base, "--prefix", str(prefix), "--output", str(out)])
    first, second, third = out.read_text(encoding="utf-8").splitlines()
    assert first.startswith("the green") and third.startswith("outside")
    main([*base, "--output", str(out)])
    assert out.read_text(encoding="utf-8").splitlines()[1] == second  # '' is no prefix
    main([*base, "--prefix", str(prefix), "--n-best", "2", "--output", str(out)])
    n_best = [line.split(" ||| ") for line in out.read_text(encoding="utf-8").splitlines()]
    assert [i for i, _, _ in n_best] == ["0", "0", "1", "1", "2", "2"]
    assert all(text.startswith("outside") for i, text, _ in n_best if i == "2")
    main([*base, "--prefix", str(prefix), "--alignments", "--output", str(out)])
    assert out.read_text(encoding="utf-8").splitlines()[0].startswith("the green")
    write_lines(prefix, ["the", "grass"])
    with pytest.raises(SystemExit, match="has 2 lines, the input 3"):
        main([*base, "--prefix", str(prefix)])


# --- a start that ends inside a word, or after one ---


def test_an_unfinished_last_word_is_spelled_on_in_any_pieces(tmp_path):
    """ "the gre": every output's text starts with it (the n best, greedy, samples), the word
    finished as the model likes ("green", "grass" is ruled out), each hypothesis scored as forced
    decoding scores its pieces; a start ending in a space asks for a new word."""
    translator = toy_translator(tmp_path)
    lines = ["the dog runs", "green grass", "children playing outside"]
    for decode, sampling in [(replace(translator.decode, beam_size=3, n_best=3), None),
                             (replace(translator.decode, beam_size=1), None),
                             (translator.decode, Sampling(samples=3, seed=2))]:  # fmt: skip
        prefixes = ["the gre", "chi", "the "]
        found = translator.hypotheses(lines, decode, sampling, prefixes)
        for line, prefix, outputs in zip(lines, prefixes, found, strict=True):
            source = translator.vocab.encode([line])[0]
            scores = score_ids(translator.model, translator.vocab,
                               [(source, h.tokens) for _, h in outputs], CPU)  # fmt: skip
            for (text, hypothesis), score in zip(outputs, scores, strict=True):
                assert text.startswith(prefix.rstrip()), (prefix, text)
                assert hypothesis.log_prob == pytest.approx(score.log_prob, rel=1e-6)
        assert all(t == "the" or t.startswith("the ") for t, _ in found[2])


def test_a_wide_beam_finds_the_exhaustive_best_spelling_of_an_unfinished_word(tmp_path):
    """Over every sequence of at most three pieces of the toy vocabulary whose text starts with
    "gr" (a piece starting a word first; the limit raised to three and the end), the best by
    score is what a wide beam finds, and every hypothesis it ends is one of them."""
    translator = toy_translator(tmp_path)
    vocab, model = translator.vocab, translator.model
    writable = list(range(4, vocab.size))
    starts = [i for i in writable if vocab.pieces([i])[0].startswith("\u2581")]
    candidates, growing = [], [[i] for i in starts]
    for _ in range(3):  # extend only what can still become "gr...": text only grows
        texts = vocab.decode(growing)
        candidates += [s for s, text in zip(growing, texts, strict=True) if text.startswith("gr")]
        growing = [[*s, i] for s, text in zip(growing, texts, strict=True)
                   if len(s) < 3 and ("gr".startswith(text) or text.startswith("gr"))
                   for i in writable]  # fmt: skip
    source = vocab.encode(["the dog runs"])[0]
    scored = score_ids(model, vocab, [(source, c) for c in candidates], CPU)

    def score(tokens, log_prob):
        return log_prob / length_penalty(len(tokens) + 1, 0.6)

    best = max(zip(candidates, scored, strict=True), key=lambda p: score(p[0], p[1].log_prob))
    decode = DecodeConfig(beam_size=64, n_best=64, alpha=0.6, max_len_a=0.0, max_len_b=3)
    found = translator.hypotheses(["the dog runs"], decode, prefixes=["gr"])[0]
    assert found[0][1].tokens == best[0]
    assert {tuple(h.tokens) for _, h in found} <= {tuple(c) for c in candidates}
    assert len(candidates) > 50 and len(found) > 2


def test_unfinished_words_decode_in_a_batch_as_alone(tmp_path):
    translator = toy_translator(tmp_path)
    lines = ["the dog runs", "green grass", "children playing outside", "dog"]
    prefixes = ["the gre", "", "chi", "grass "]
    decode = replace(translator.decode, beam_size=3, n_best=3, batch_size=4)
    together = translator.translate(lines, decode, prefixes=prefixes)
    for line, prefix, outputs in zip(lines, prefixes, together, strict=True):
        alone = translator.translate([line], decode, prefixes=[prefix])[0]
        assert [t for t, _ in outputs] == [t for t, _ in alone]
        assert [s for _, s in outputs] == pytest.approx([s for _, s in alone])


def test_the_pieces_that_may_spell_on(tmp_path):
    """After "gr" is asked for at a word's start: the pieces starting a word that spell part of
    it or all of it and more, never an end; inside the word, the others; after a space, any new
    word, or the end."""
    from transduce.decoding.prefix import PieceTable

    vocab = toy_translator(tmp_path).vocab
    table, pieces = PieceTable.of(vocab), vocab.pieces(list(range(vocab.size)))

    def allowed(rest, new_word):
        return {pieces[i] for i in table.allowed(rest, new_word).nonzero().flatten().tolist()}

    starts = {p for p in pieces[4:] if p.startswith("\u2581")}
    spelling = {p for p in starts if "gr".startswith(p[1:]) or p[1:].startswith("gr")}
    assert allowed("gr", True) == spelling and "\u2581gr" in spelling
    inside = {p for p in pieces[4:] if p not in starts and ("r".startswith(p) or p.startswith("r"))}
    assert allowed("r", False) == inside and inside
    assert allowed("", True) == starts | {"</s>"}
    lone, g, gr, grass = vocab.piece_ids(["\u2581", "g", "\u2581gr", "\u2581grass"])
    assert table.spelled(lone, "gr") == "gr" and table.spelled(g, "gr") == "r"
    assert table.spelled(gr, "gr") == "" and table.spelled(grass, "gr") == ""


@pytest.mark.parametrize("kind", ["beam", "greedy", "sampling"])
def test_a_word_spelled_from_a_lone_word_start_fits_the_length_limit(tmp_path, kind):
    """The toy vocabulary writes "u" at a word's start only as "\u2581" then "u": two pieces
    for one letter, which the raised length limit must leave room for (with one less, the row
    met its limit with the end ruled out: no output, or a sampler's error)."""
    translator = toy_translator(tmp_path)
    assert not translator.vocab.lacking("u") and "\u2581u" not in translator.vocab.pieces(
        list(range(translator.vocab.size))
    )
    decode = replace(translator.decode, max_len_b=1, beam_size=1 if kind == "greedy" else 2)
    sampling = Sampling(samples=2, seed=4) if kind == "sampling" else None
    for prefix in ["u", "the u"]:
        found = translator.translate(["dog"], decode, sampling, prefixes=[prefix])[0]
        assert found and all(text.startswith(prefix) for text, _ in found), found


def test_spaces_of_any_kind_split_words_and_an_empty_lines_prefix_is_not_read(tmp_path):
    """A tab or a no-break space separates words as a space does (they are not refused as
    characters the vocabulary lacks, which they may be); an empty line translates to '' and its
    prefix, even one no output could start with, is not read."""
    translator = toy_translator(tmp_path)
    tabbed = translator.translate(["the dog"], prefixes=["\tthe\tdog\u00a0"])[0][0][0]
    assert tabbed.startswith("the dog ") or tabbed == "the dog"
    found = translator.translate(["", "the dog"], prefixes=["a \u2603", "gr"])
    assert found[0] == [("", 0.0)] and found[1][0][0].startswith("gr")


def test_an_ensemble_and_the_channel_complete_the_prefix_too(tmp_path):
    """An ensemble of two models of different shapes: every n-best output starts with the
    prefix and scores as the ensemble's forced decoding; the channel re-ranks only candidates
    that start with it."""
    from transduce.config import DecodeConfig
    from transduce.decoding.channel import channel_rerank

    from .conftest import save_seeded_model, toy_vocab

    vocab = toy_vocab(tmp_path)
    decode = DecodeConfig(beam_size=3, n_best=3, max_len_b=5)
    first = save_seeded_model(tmp_path / "a.pt", vocab, 1, decode=decode)
    second = save_seeded_model(tmp_path / "b.pt", vocab, 2, n_layers=1, h=4, d_k=4, d_v=4)
    ensemble = Translator.load([first, second])
    lines, prefixes = ["the dog runs", "green grass"], ["children pl", "the "]
    found = ensemble.hypotheses(lines, prefixes=prefixes)
    for line, prefix, outputs in zip(lines, prefixes, found, strict=True):
        assert len(outputs) == 3
        pairs = [(vocab.encode([line])[0], h.tokens) for _, h in outputs]
        scores = score_ids(ensemble.model, vocab, pairs, CPU)
        for (text, hypothesis), score in zip(outputs, scores, strict=True):
            assert text.startswith(prefix.rstrip())
            assert hypothesis.log_prob == pytest.approx(score.log_prob, rel=1e-5)
    reverse = Translator.load(first)
    ranked = channel_rerank(ensemble, reverse, lines, 0.5, prefixes=prefixes)
    for prefix, candidates in zip(prefixes, ranked, strict=True):
        assert len(candidates) == 3 and all(t.startswith(prefix.rstrip()) for t, _ in candidates)
