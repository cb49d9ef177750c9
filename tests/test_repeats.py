"""Decoding without repeated n-grams (`decoding/repeats.py`, `translate --no-repeat-ngram`, the
server's `no_repeat_ngram`): no output holds an n-gram twice, in beam search, greedy search and
sampling; a wide beam finds exactly the outputs without one; what a term or a prefix asks for
wins over the rule."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from transduce.cli import main
from transduce.config import DecodeConfig, TaskConfig
from transduce.decoding.forced import score_ids
from transduce.decoding.repeats import NoRepeat
from transduce.decoding.sampling import Sampling, sample
from transduce.decoding.search import beam_search, greedy_search, length_penalty
from transduce.decoding.spelling import spelling
from transduce.decoding.terms import TermConstraint, Terms, contains
from transduce.decoding.translate import Translator

from .conftest import (
    EOS,
    PAD,
    SENTENCES,
    SPECIALS,
    BarePieces,
    SpecialIds,
    padded_sources,
    save_toy_model,
    tiny_model,
    tiny_rnn,
    toy_translator,
    write_lines,
)

CPU = torch.device("cpu")


def repeated(tokens: list[int], n: int) -> bool:
    """Whether `tokens` hold some n-gram twice (overlapping or not)."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


def _outputs(kind: str, model, src, **given) -> list[list[list[int]]]:
    """Long outputs (input + 12) from a random tiny model: it loops, as weak models do."""
    if kind == "beam":
        found = beam_search(model, src, **SPECIALS, beam_size=3, n_best=3, max_len_b=12, **given)
        return [[h.tokens for h in hyps] for hyps in found]
    if kind == "greedy":
        return [[t] for t in greedy_search(model, src, **SPECIALS, max_len_b=12, **given)]
    drawing = Sampling(samples=4, seed=2, temperature=0.5)  # sharper: loops
    found = sample(model, src, drawing, **SPECIALS, max_len_b=12, **given)
    return [[h.tokens for h in hyps] for hyps in found]


@pytest.mark.parametrize("kind", ["beam", "greedy", "sampling"])
@pytest.mark.parametrize("family", ["transformer", "rnn"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_output_holds_an_n_gram_twice_that_it_would_have(kind, family, n):
    model = tiny_model(seed=3) if family == "transformer" else tiny_rnn(seed=1)
    src = padded_sources(SENTENCES)
    plain = _outputs(kind, model, src)
    assert any(repeated(tokens, n) for outputs in plain for tokens in outputs)
    found = _outputs(kind, model, src, no_repeat_ngram=n)
    for outputs in found:
        assert outputs
        for tokens in outputs:
            assert not repeated(tokens, n), (n, tokens)
    assert _outputs(kind, model, src, no_repeat_ngram=0) == plain


def test_a_wide_beam_finds_the_exhaustive_best_output_without_a_repeated_bigram():
    """Over three writable tokens and outputs of at most four: the n best of a beam that keeps
    everything are exactly the outputs without a bigram twice, scored as teacher forcing
    scores them, the best the exhaustive best."""
    model, source = tiny_model(5, vocab_size=6), [4, 5]
    src = torch.tensor([[*source, EOS]])
    outputs = [list(t) for n in range(5) for t in itertools.product([1, 4, 5], repeat=n)]
    allowed = [t for t in outputs if not repeated(t, 2)]
    assert len(allowed) < len(outputs)
    scored = score_ids(model, SpecialIds(), [(source, t) for t in allowed], CPU)
    teacher = {tuple(t): s.log_prob for t, s in zip(allowed, scored, strict=True)}

    def score(tokens):
        return teacher[tuple(tokens)] / length_penalty(len(tokens) + 1, 0.6)

    found = beam_search(model, src, **SPECIALS, beam_size=300, n_best=300, alpha=0.6,
                        max_len_a=0, max_len_b=5, no_repeat_ngram=2)[0]  # fmt: skip
    assert sorted(h.tokens for h in found) == sorted(allowed)
    assert found[0].tokens == max(allowed, key=score)
    for hypothesis in found:
        assert hypothesis.log_prob == pytest.approx(teacher[tuple(hypothesis.tokens)])


@pytest.mark.parametrize(
    "n, written, banned",
    [
        (2, [5], []),  # no bigram yet
        (2, [5, 6, 5], [6]),  # 5 6 again
        (2, [5, 5], [5]),  # 5 5 again, overlapping
        (3, [5, 6, 7, 5, 6], [7]),
        (3, [5, 6, 7, 5, 6, 8, 5, 6], [7, 8]),  # both trigrams that start 5 6
        (3, [6, 7, 5, 6], []),  # 5 6 came before, but not as a trigram's start
        (1, [5, 9, 5], [5, 9]),  # no token twice
    ],
)
def test_the_rule_rules_out_each_token_that_completes_an_n_gram_held(n, written, banned):
    state = NoRepeat(n, 1, CPU, None)
    for token in written:
        state.advance(torch.tensor([token]))
    log_probs = torch.zeros(1, 10)
    state.restrict(log_probs, torch.tensor([5]))
    assert (log_probs[0] == float("-inf")).nonzero().flatten().tolist() == banned


def test_a_row_the_rule_would_leave_no_token_keeps_its_own_and_rows_follow_the_beam():
    state = NoRepeat(2, 2, CPU, None)
    for tokens in ([5, 7], [6, 8], [5, 7]):  # rows 5 6 5 and 7 8 7
        state.advance(torch.tensor(tokens))
    only_six = torch.full((2, 10), float("-inf"))
    only_six[:, 6] = -1.0
    state.restrict(only_six, torch.tensor([5, 5]))  # row 0: 6 would repeat 5 6; alone, kept
    assert only_six[:, 6].tolist() == [-1.0, -1.0]
    state.reorder(torch.tensor([1, 1, 0]))
    log_probs = torch.zeros(3, 10)
    state.restrict(log_probs, torch.tensor([5, 5, 5]))
    assert (log_probs == float("-inf")).nonzero().tolist() == [[0, 8], [1, 8], [2, 6]]
    with pytest.raises(ValueError, match="n-grams of at least 1 token"):
        NoRepeat(-1, 1, CPU, None)


def test_a_term_that_repeats_itself_and_a_prefix_that_does_are_written():
    """The rule would forbid the second 5 5 of the term 5 5 5 and of the prefix 6 6 6: what
    was asked for wins, and the rest of the output keeps to the rule."""
    model, src = tiny_model(seed=3), padded_sources(SENTENCES)
    found = beam_search(model, src, **SPECIALS, beam_size=4, max_len_b=8, no_repeat_ngram=2,
                        terms=[[[5, 5, 5]]] * len(SENTENCES))  # fmt: skip
    for hyps in found:
        tokens = hyps[0].tokens
        assert hyps[0].missing == 0 and contains(tokens, [5, 5, 5]), tokens
        at = next(i for i in range(len(tokens)) if tokens[i : i + 3] == [5, 5, 5])
        assert not repeated(tokens[: at + 2], 2) and not repeated(tokens[at + 1 :], 2), tokens
    for kind in ("beam", "greedy"):
        for tokens in (out for outputs in _outputs(kind, model, src, no_repeat_ngram=2,
                       prefixes=[[6, 6, 6]] * 4) for out in outputs):  # fmt: skip
            assert tokens[:3] == [6, 6, 6] and not repeated(tokens[1:], 2), tokens


def test_only_a_term_not_yet_met_lets_its_tokens_through():
    """ "犬" spelled: before it is met, "犬" and "犬が" take it further; once met, nothing does
    ("犬が" would meet it again inside a piece), and the rule bans a second "犬" again."""
    vocab = BarePieces(["犬", "犬が", "が"])
    terms = Terms(((4,),), (False,), None, (spelling(vocab, "犬", False),))
    state = TermConstraint([terms], EOS, CPU)
    assert sorted(set(state.advancing().flatten().tolist()) - {-1}) == [4, 5]
    rule = NoRepeat(1, 1, CPU, state)
    for piece in (4, 6):
        state.advance(torch.tensor([piece]))
        rule.advance(torch.tensor([piece]))
    assert (state.advancing() == -1).all()
    log_probs = torch.zeros(1, vocab.size)
    rule.restrict(log_probs, torch.tensor([5]))
    assert (log_probs[0] == float("-inf")).nonzero().flatten().tolist() == [4, 6]


def test_a_batch_decodes_as_each_sentence_alone_without_repeats():
    model, src = tiny_model(seed=4), padded_sources(SENTENCES)
    together = _outputs("beam", model, src, no_repeat_ngram=2)
    for i in range(len(src)):
        alone = src[i : i + 1, : int((src[i] != PAD).sum())]
        assert together[i] == _outputs("beam", model, alone, no_repeat_ngram=2)[0]


# --- text: Translator, the command line, the server ---


def _loops(translator: Translator, lines: list[str], decode: DecodeConfig, n: int) -> int:
    """How many of the lines' best outputs hold some n-gram of subwords twice."""
    found = translator.hypotheses(lines, decode)
    return sum(repeated(hyps[0][1].tokens, n) for hyps in found)


def test_translations_keep_to_the_run_s_setting_and_a_parser_refuses_it(tmp_path):
    translator = toy_translator(tmp_path)
    lines = ["the dog runs", "green grass", "children playing outside"]
    decode = replace(translator.decode, beam_size=3, max_len_b=12)
    assert _loops(translator, lines, decode, 2) > 0
    assert _loops(translator, lines, replace(decode, no_repeat_ngram=2), 2) == 0
    with pytest.raises(ValueError, match="no_repeat_ngram must be >= 0"):
        DecodeConfig(no_repeat_ngram=-1)
    parser = Translator(translator.model, translator.vocab, decode, CPU, TaskConfig(name="parse"))
    with pytest.raises(ValueError, match="no_repeat_ngram is for translation"):
        parser.translate(["the dog"], replace(decode, no_repeat_ngram=3))


def test_the_command_line_and_the_server_cut_loops(tmp_path):
    (tmp_path / "ruled").mkdir()
    model = save_toy_model(tmp_path, DecodeConfig(beam_size=3, max_len_b=12))
    translator = Translator.load(model)
    lines = ["the dog runs", "green grass", "children playing outside"]
    decode = replace(translator.decode, no_repeat_ngram=2)
    plain = [hyps[0][0] for hyps in translator.translate(lines)]
    want = [hyps[0][0] for hyps in translator.translate(lines, decode)]
    assert want != plain
    source, out = write_lines(tmp_path / "in.txt", lines), tmp_path / "out.txt"
    main(["translate", "--model", str(model), "--input", str(source), "--no-repeat-ngram", "2",
          "--output", str(out)])  # fmt: skip
    assert out.read_text(encoding="utf-8").splitlines() == want
    with pytest.raises(SystemExit, match="no_repeat_ngram must be >= 0"):
        main(["translate", "--model", str(model), "--input", str(source),
              "--no-repeat-ngram", "-2"])  # fmt: skip
    # A run that sets the rule: its own by default, and 0 turns it off.
    ruled = save_toy_model(tmp_path / "ruled", decode)
    assert [hyps[0][0] for hyps in Translator.load(ruled).translate(lines)] == want
    main(["translate", "--model", str(ruled), "--input", str(source), "--output", str(out)])
    assert out.read_text(encoding="utf-8").splitlines() == want
    main(["translate", "--model", str(ruled), "--input", str(source), "--output", str(out),
          "--no-repeat-ngram", "0"])  # fmt: skip
    assert out.read_text(encoding="utf-8").splitlines() == plain
    httpx = pytest.importorskip("httpx", reason="the dev extra")
    pytest.importorskip("fastapi", reason="the serve extra")
    from transduce.serve.engine import Engine
    from transduce.serve.server import Background
    from transduce.serve.settings import ServeSettings

    served = Background(Engine.load(model), ServeSettings(port=0))
    with served as url, httpx.Client(base_url=url) as client:
        answer = client.post("/v1/translate", json={"texts": lines, "no_repeat_ngram": 2})
        assert [t["text"] for t in answer.json()["translations"]] == want
        answer = client.post("/v1/translate", json={"texts": lines})
        assert [t["text"] for t in answer.json()["translations"]] == plain
        assert client.get("/v1/models").json()["models"][0]["decode"]["no_repeat_ngram"] == 0
        for bad in (-1, "2", 2.5):
            answer = client.post("/v1/translate", json={"text": "dog", "no_repeat_ngram": bad})
            assert answer.status_code == 422, bad
        assert client.post("/v1/translate", json={"text": "dog"}).status_code == 200
    parser = Translator(translator.model, translator.vocab, translator.decode, CPU,
                        TaskConfig(name="parse"))  # fmt: skip
    with Background(Engine(parser, "parser"), ServeSettings(port=0)) as url:
        answer = httpx.post(url + "/v1/translate", json={"text": "dog", "no_repeat_ngram": 2})
        assert answer.status_code == 422 and "is for translation" in answer.text
        assert '"noRepeat": null' in httpx.get(url + "/").text  # the page offers no box
