"""Avoid lists (`decoding/avoid.py`, `translate --avoid`, the server's `avoid`): no output holds
an avoided phrase's tokens in a row, in beam search, greedy search and sampling, and a wide
beam finds the best output without it."""

from __future__ import annotations

import itertools
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
import torch

from transduce.cli import main
from transduce.config import Config, TaskConfig
from transduce.decoding.avoid import MAX_AVOIDED, AvoidConstraint, with_unknown_avoided
from transduce.decoding.forced import score_ids
from transduce.decoding.sampling import Sampling, sample
from transduce.decoding.search import beam_search, greedy_search, length_penalty
from transduce.decoding.terms import Terms, contains
from transduce.decoding.translate import Translator
from transduce.training.checkpoint import load, save

from .conftest import (
    EOS,
    PAD,
    SENTENCES,
    SPECIALS,
    TOY_WORDS,
    SpecialIds,
    padded_sources,
    save_toy_model,
    tiny_model,
    tiny_rnn,
    toy_translator,
    write_lines,
)

CPU = torch.device("cpu")


def _sources() -> torch.Tensor:
    return padded_sources(SENTENCES)


def _outputs(kind: str, model, src, **given) -> list[list[list[int]]]:
    if kind == "beam":
        found = beam_search(model, src, **SPECIALS, beam_size=3, n_best=3, max_len_b=4, **given)
        return [[h.tokens for h in hyps] for hyps in found]
    if kind == "greedy":
        return [[tokens] for tokens in greedy_search(model, src, **SPECIALS, max_len_b=4, **given)]
    found = sample(model, src, Sampling(samples=4, seed=2), **SPECIALS, max_len_b=4, **given)
    return [[h.tokens for h in hyps] for hyps in found]


@pytest.mark.parametrize("kind", ["beam", "greedy", "sampling"])
@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_no_output_holds_an_avoided_phrase_that_it_would_have(kind, family):
    """The phrases avoided are pieces of what the search writes without them (a pair of tokens
    and a single one), so the rule has work to do; then no output holds them."""
    model = tiny_model(seed=3) if family == "transformer" else tiny_rnn(seed=3)
    src = _sources()
    plain = _outputs(kind, model, src)
    first = next(tokens for outputs in plain for tokens in outputs if len(tokens) >= 2)
    last = next(tokens[-1] for outputs in plain[1:] for tokens in outputs if tokens)
    avoided = [first[:2], [last]]
    found = _outputs(kind, model, src, avoid=avoided)
    for outputs in found:
        assert outputs
        for tokens in outputs:
            assert not any(contains(tokens, phrase) for phrase in avoided), (avoided, tokens)
    assert found != plain


def test_a_wide_beam_finds_the_exhaustive_best_output_without_the_phrase():
    """Over three writable tokens and outputs of at most four: the n best of a beam that keeps
    everything are exactly the outputs without [5, 4] (those of four tokens end at the limit),
    scored as teacher forcing scores them, the best the exhaustive best."""
    model, source, phrase = tiny_model(5, vocab_size=6), [4, 5], [5, 4]
    src = torch.tensor([[*source, EOS]])
    outputs = [list(t) for n in range(5) for t in itertools.product([1, 4, 5], repeat=n)]
    allowed = [t for t in outputs if not contains(t, phrase)]
    scored = score_ids(model, SpecialIds(), [(source, t) for t in allowed], CPU)
    teacher = {tuple(t): s.log_prob for t, s in zip(allowed, scored, strict=True)}

    def score(tokens):
        return teacher[tuple(tokens)] / length_penalty(len(tokens) + 1, 0.6)

    found = beam_search(model, src, **SPECIALS, beam_size=300, n_best=300, alpha=0.6,
                        max_len_a=0, max_len_b=5, avoid=[phrase])[0]  # fmt: skip
    assert sorted(h.tokens for h in found) == sorted(allowed)
    assert found[0].tokens == max(allowed, key=score)
    for hypothesis in found:
        assert hypothesis.log_prob == pytest.approx(teacher[tuple(hypothesis.tokens)])


def test_the_completing_token_is_ruled_out_after_any_way_into_the_phrase():
    """[5, 5, 6]: after 5 5 (and after 5 5 5, still two of it), 6 is ruled out, nothing
    else; a row with no other token keeps it (what a prefix forces wins)."""
    state = AvoidConstraint(Terms(((5, 5, 6),), (False,)), 1, EOS, CPU)
    for token, banned in [(5, False), (5, True), (5, True), (4, False), (5, False), (5, True)]:
        state.advance(torch.tensor([token]))
        log_probs = torch.zeros(1, 10)
        state.restrict(log_probs, torch.tensor([5]))
        assert (log_probs[0, 6] == float("-inf")) == banned
        assert (log_probs[0, [0, 1, 2, 3, 4, 5, 7, 8, 9]] == 0).all()
    only_six = torch.full((1, 10), float("-inf"))
    only_six[0, 6] = -1.0
    state.restrict(only_six, torch.tensor([5]))
    assert only_six[0, 6] == -1.0


def test_a_phrase_given_back_once_is_avoided_again():
    """A prefix may spell an avoided phrase (the rule gives way), but not open the door to a
    second: after [5] forced, 5 is ruled out again; after [5, 6] forced, 5 then 6 is too;
    after [5, 5] forced, a third 5 (which ends a second [5, 5]) at once."""
    for phrase, forced, then in [((5,), [5], 5), ((5, 6), [5, 6, 5], 6), ((5, 5), [5, 5], 5)]:
        state = AvoidConstraint(Terms((phrase,), (False,)), 1, EOS, CPU)
        for token in forced:
            state.advance(torch.tensor([token]))
        log_probs = torch.zeros(1, 10)
        state.restrict(log_probs, torch.tensor([5]))
        assert log_probs[0, then] == float("-inf"), (phrase, forced)


def test_a_prefix_that_spells_an_avoided_word_does_not_let_the_search_write_it_again(tmp_path):
    translator = toy_translator(tmp_path)
    decode = replace(translator.decode, beam_size=1, max_len_b=6)
    banned = translator.vocab.encode(["runs"])[0]
    found = translator.hypotheses(["the dog runs"], decode, prefixes=["runs "], avoid=["runs"])
    tokens = found[0][0][1].tokens
    assert tokens[: len(banned)] == banned and not contains(tokens[len(banned) :], banned)
    with pytest.raises(ValueError, match="has 17 subwords: at most 16"):
        translator.translate(["dog"], avoid=[" ".join(["dog"] * 17)])
    parser = Translator(translator.model, translator.vocab, translator.decode, CPU,
                        TaskConfig(name="parse"))  # fmt: skip
    assert parser.translate(["the dog"], avoid=[]) == parser.translate(["the dog"])


def test_a_batch_decodes_as_each_sentence_alone_with_an_avoid_list():
    model, src = tiny_model(seed=4), _sources()
    avoided = [[5, 5], [9]]
    together = _outputs("beam", model, src, avoid=avoided)
    for i in range(len(src)):
        alone = _outputs("beam", model, src[i : i + 1, : int((src[i] != PAD).sum())],
                         avoid=avoided)  # fmt: skip
        assert together[i] == alone[0]


# --- text: Translator, the command line, the server ---


def test_translations_avoid_the_words_and_a_term_may_not_hold_one(tmp_path):
    translator = toy_translator(tmp_path)
    lines = ["the dog runs", "green grass", "children playing outside"]
    decode = replace(translator.decode, beam_size=3, n_best=3, max_len_b=6)
    plain = translator.translate(lines, decode)
    written = {w for hyps in plain for text, _ in hyps for w in text.split()}
    words = [w for w in TOY_WORDS if w in written][:3]  # words as the vocabulary encodes them
    assert words
    found = translator.translate(lines, decode, avoid=words)
    vocab = translator.vocab
    banned = [vocab.encode([w])[0] for w in words]
    for hyps in translator.hypotheses(lines, decode, avoid=words):
        for _, h in hyps:
            assert not any(contains(h.tokens, b) for b in banned), (words, h.tokens)
    assert found != plain
    assert translator.translate(lines, decode, avoid=[]) == plain
    assert translator.translate(lines, decode, avoid=["☃"]) == plain  # no output could hold it
    with pytest.raises(ValueError, match="line 2: the term 'green grass' holds the avoided"):
        translator.translate(lines, decode, terms=[[], ["green grass"], []], avoid=["grass"])
    with pytest.raises(ValueError, match=f"at most {MAX_AVOIDED}"):
        translator.translate(lines, avoid=[f"w{i}" for i in range(MAX_AVOIDED + 1)])
    with pytest.raises(TypeError, match="a list of phrases, not one string"):
        translator.translate(lines, avoid="grass")
    parser = Translator(translator.model, vocab, translator.decode, CPU, TaskConfig(name="parse"))
    with pytest.raises(ValueError, match="an avoid list is for translation"):
        parser.translate(["the dog"], avoid=["(S"])


def test_the_command_line_and_the_server_avoid_the_list(tmp_path):
    model = save_toy_model(tmp_path)
    translator = Translator.load(model)
    lines = ["the dog runs", "green grass", "children playing outside"]
    plain = [hyps[0][0] for hyps in translator.translate(lines)]
    avoid = [w for w in TOY_WORDS if any(w in text.split() for text in plain)][:2]
    assert avoid, plain
    want = [hyps[0][0] for hyps in translator.translate(lines, avoid=avoid)]
    assert want != plain
    source = write_lines(tmp_path / "in.txt", lines)
    path = write_lines(tmp_path / "avoid.txt", [*avoid, ""])
    out = tmp_path / "out.txt"
    main(["translate", "--model", str(model), "--input", str(source), "--avoid", str(path),
          "--output", str(out)])  # fmt: skip
    assert out.read_text(encoding="utf-8").splitlines() == want
    httpx = pytest.importorskip("httpx", reason="the dev extra")
    pytest.importorskip("fastapi", reason="the serve extra")
    from transduce.serve.engine import Engine
    from transduce.serve.server import Background
    from transduce.serve.settings import ServeSettings

    served = Background(Engine.load(model), ServeSettings(port=0, batch_wait_ms=100))
    with served as url, httpx.Client(base_url=url) as client:
        # At once, with the list and without: never merged into one call (the list is a call's).
        bodies = [{"texts": lines, "avoid": avoid}, {"texts": lines}]
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda b: client.post("/v1/translate", json=b).json(), bodies))
        assert [t["text"] for t in answers[0]["translations"]] == want
        assert [t["text"] for t in answers[1]["translations"]] == plain
        bad = client.post("/v1/translate", json={"text": "dog", "avoid": ["grass"],
                                                 "terms": ["green grass"]})  # fmt: skip
        assert bad.status_code == 422 and "holds the avoided 'grass'" in bad.text


def test_the_command_line_finds_a_term_that_holds_an_avoided_word_before_writing(tmp_path):
    """Line 3's term, read a line at a time, and a glossary's translation: named, as their
    line and entry, before any output is written."""
    model = save_toy_model(tmp_path)
    source = write_lines(tmp_path / "in.txt", ["the dog", "grass", "children"])
    avoid = write_lines(tmp_path / "avoid.txt", ["grass"])
    terms = write_lines(tmp_path / "terms.txt", ["", "dog", "green grass"])
    glossary = write_lines(tmp_path / "glossary.tsv", ["dog\toutside", "cat\tthe grass"])
    out = tmp_path / "out.txt"
    base = ["translate", "--model", str(model), "--input", str(source), "--avoid", str(avoid),
            "--buffer-size", "1", "--output", str(out)]  # fmt: skip
    with pytest.raises(SystemExit, match="line 3: the term 'green grass' holds the avoided"):
        main([*base, "--terms", str(terms)])
    with pytest.raises(SystemExit, match="glossary entry 2: the term 'the grass' holds the"):
        main([*base, "--glossary", str(glossary)])
    assert not out.exists()


def test_no_unk_rules_the_unknown_token_out_in_python_the_command_line_and_the_server(tmp_path):
    """A model made to like the unknown token (its embedding, shared with the output layer, a
    multiple of a token it writes): it writes " ⁇ " until `no_unk` rules it out, with an avoid
    list or without; the command line's `--no-unk` and the server's `no_unk` too."""
    model = save_toy_model(tmp_path)
    translator = Translator.load(model)
    with torch.no_grad():
        weights = translator.model.src_embed.tokens.weight
        weights[translator.vocab.unk] = 1.5 * weights[18]
    save({**load(model), "model": translator.model.state_dict()}, model)
    translator = Translator.load(model)
    lines, unk = ["the dog runs", "green grass"], translator.vocab.unk
    ruled = replace(translator.decode, no_unk=True)
    assert any(unk in hyps[0][1].tokens for hyps in translator.hypotheses(lines))
    for avoid in (None, ["grass"]):
        found = translator.hypotheses(lines, ruled, avoid=avoid)
        assert not any(unk in hyps[0][1].tokens for hyps in found)
    want = [hyps[0][0] for hyps in translator.translate(lines, ruled)]
    both = with_unknown_avoided(Terms(((5, 6),), (False,)), unk)  # the list kept, the token added
    assert both.phrases == ((5, 6), (unk,)) and both.spelled == (None, None)
    assert "⁇" in translator.translate(lines)[0][0][0] and not any("⁇" in t for t in want)
    source, out = write_lines(tmp_path / "in.txt", lines), tmp_path / "out.txt"
    main(["translate", "--model", str(model), "--input", str(source), "--no-unk",
          "--output", str(out)])  # fmt: skip
    assert out.read_text(encoding="utf-8").splitlines() == want
    # A run that rules it out: its own by default, and --allow-unk lets it back.
    state = load(model)
    config = Config.from_dict(json.loads(state["config"]))
    ruled = tmp_path / "ruled.pt"
    save({**state, "config": replace(config, decode=replace(config.decode, no_unk=True)).to_json()},
         ruled)  # fmt: skip
    assert [hyps[0][0] for hyps in Translator.load(ruled).translate(lines)] == want
    main(["translate", "--model", str(ruled), "--input", str(source), "--allow-unk",
          "--output", str(out)])  # fmt: skip
    assert "⁇" in out.read_text(encoding="utf-8")
    httpx = pytest.importorskip("httpx", reason="the dev extra")
    pytest.importorskip("fastapi", reason="the serve extra")
    from transduce.serve.engine import Engine
    from transduce.serve.server import Background
    from transduce.serve.settings import ServeSettings

    with Background(Engine.load(model), ServeSettings(port=0)) as url, httpx.Client() as client:
        answer = client.post(url + "/v1/translate", json={"texts": lines, "no_unk": True})
        assert [t["text"] for t in answer.json()["translations"]] == want
        answer = client.post(url + "/v1/translate", json={"texts": lines})
        assert "⁇" in answer.json()["translations"][0]["text"]
        refused = client.post(url + "/v1/translate", json={"text": "x", "no_unk": 1})
        assert refused.status_code == 422
