"""`prefix` / `prefixes` and `terms` / `term_lists` of `POST /v1/translate` against a real uvicorn
on loopback: each translation starts with its prefix, holds its terms and is what
`Translator.translate` gives, merged with other requests or not; a prefix no output can start
with, or a term none can hold, is answered 422 (413 when too long), alone."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

httpx = pytest.importorskip("httpx", reason="the dev extra: pip install -e '.[dev]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

import torch  # noqa: E402

from transduce.config import TaskConfig  # noqa: E402
from transduce.serve.engine import BadRequest, TranslateWork  # noqa: E402
from transduce.serve.server import Background  # noqa: E402
from transduce.serve.settings import ServeSettings  # noqa: E402

from .serving import sentences, toy_engine, translated  # noqa: E402

CPU = torch.device("cpu")
LOOPBACK = ServeSettings(port=0, batch_wait_ms=50, max_sentence_tokens=30)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return toy_engine(tmp_path_factory.mktemp("serve-prefix"))


@pytest.fixture(scope="module")
def served(engine):
    with Background(engine, LOOPBACK) as url:
        yield url


def _request(i: int) -> dict:
    """Requests of each shape: one text with a prefix or without, several with prefixes."""
    texts, starts = sentences(1 + i % 3, seed=i), sentences(3, seed=50 + i)
    if i % 4 == 0:
        return {"text": texts[0], "prefix": starts[0], "n_best": 2}
    if i % 4 == 1:
        return {"text": texts[0], "n_best": 2}
    return {"texts": texts, "prefixes": ["", *starts][: len(texts)], "n_best": 2}


def test_merged_requests_get_what_offline_translation_gives(engine, served):
    """Eight clients at once, with prefixes and without (merged by the batcher into shared
    calls): each answer is its own texts' n best under its own prefixes, as `Translator`
    gives them alone, every candidate starting with its prefix."""
    requests = [_request(i) for i in range(8)]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda body: translated(served, body), requests))
    decode = replace(engine.translator.decode, n_best=2)
    for body, answer in zip(requests, answers, strict=True):
        texts = body.get("texts") or [body["text"]]
        prefixes = body.get("prefixes") or ([body["prefix"]] if "prefix" in body else None)
        offline = engine.translator.translate(texts, decode, prefixes=prefixes)
        for prefix, got, want in zip(prefixes or [""] * len(texts), answer["translations"],
                                     offline, strict=True):  # fmt: skip
            assert [c["text"] for c in got["n_best"]] == [text for text, _ in want]
            assert [c["score"] for c in got["n_best"]] == pytest.approx([s for _, s in want])
            assert all(c["text"].startswith(prefix) for c in got["n_best"])
    assert any(body.get("prefix") for body in requests)


def test_works_with_and_without_prefixes_decode_together_as_alone(engine):
    """The worker's merged call: a request without prefixes before two with them, each line
    under its own request's prefix."""
    decode = replace(engine.translator.decode, n_best=2)
    works = [
        TranslateWork(["the dog runs", "grass"], decode, False),
        TranslateWork(["children playing"], decode, False, ["outside"]),
        TranslateWork(["green grass", "the dog"], decode, False, ["", "the green"]),
    ]
    merged = engine.translate(works)
    alone = [engine.translate([work])[0] for work in works]
    texts = [[[c["text"] for c in line] for line in request] for request in merged]
    assert texts == [[[c["text"] for c in line] for line in request] for request in alone]
    scores = [c["score"] for request in merged for line in request for c in line]
    assert scores == pytest.approx([c["score"] for r in alone for line in r for c in line])
    assert merged[1][0][0]["text"].startswith("outside")
    assert merged[2][1][1]["text"].startswith("the green")


def test_alignments_come_with_a_forced_prefix(served):
    with httpx.Client(base_url=served) as client:
        answer = client.post("/v1/translate", json={"text": "the dog runs", "prefix": "green",
                                                    "alignments": True}).json()  # fmt: skip
    best = answer["translations"][0]
    assert best["text"].startswith("green") and best["alignment"]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"texts": ["the dog"], "prefix": "the"}, 422, "`prefix` goes with `text`"),
        ({"text": "the dog", "prefixes": ["the"]}, 422, "`prefixes` go with `texts`"),
        ({"texts": ["the dog", "grass"], "prefixes": ["the"]}, 422, "1 prefixes for 2 texts"),
        ({"text": "the dog", "prefix": "the ☃"}, 422, "vocabulary lacks '☃'"),
        ({"text": "the dog", "prefix": 3}, 422, "valid string"),
        ({"text": "the dog", "prefix": "children playing outside " * 6}, 413, "prefix may take"),
        ({"texts": ["the dog"], "terms": ["the"]}, 422, "`terms` go with `text`"),
        ({"text": "the dog", "term_lists": [["the"]]}, 422, "`term_lists` go with `texts`"),
        ({"texts": ["the dog", "grass"], "term_lists": [["a"]]}, 422, "1 term_lists for 2 texts"),
        ({"text": "the dog", "terms": ["the ☃"]}, 422, "vocabulary lacks '☃'"),
        ({"text": "the dog", "terms": "grass"}, 422, "valid list"),
        ({"text": "the dog", "terms": [f"w{i}" for i in range(17)]}, 422, "at most 16 items"),
        ({"text": "the dog", "terms": ["grass"], "sampling": {}}, 422, "need beam search"),
        ({"text": "the dog", "glossary": {"dog": "a"}, "sampling": {}}, 422, "need beam search"),
        ({"text": "the dog", "glossary": {" ": "grass"}}, 422, "a source phrase and its"),
        ({"text": "the dog", "glossary": {"dog": "☃"}}, 422, "vocabulary lacks '☃'"),
        ({"text": "the dog", "glossary": {f"w{i}": "a" for i in range(5001)}}, 422,
         "at most 5000"),
        ({"text": "the dog", "terms": ["children playing outside " * 6]}, 413, "terms may take"),
        ({"text": "the dog", "prefix": "the ", "terms": ["children " * 28]}, 413,
         "the prefix and terms may take"),
    ],
)  # fmt: skip
def test_bad_prefixes_and_terms_are_answered_and_the_server_goes_on(served, body, status, says):
    """A term of 28 pieces fits the 30 subwords alone (with the end); after a prefix of two,
    it does not."""
    with httpx.Client(base_url=served) as client:
        answer = client.post("/v1/translate", json=body)
        assert answer.status_code == status, answer.text
        assert says in answer.text
        assert client.post("/v1/translate", json={"text": "the dog"}).status_code == 200


def test_a_lone_surrogate_prefix_is_refused(served):
    raw = b'{"text": "the dog", "prefix": "\\ud800"}'
    with httpx.Client(base_url=served) as client:
        answer = client.post("/v1/translate", content=raw,
                             headers={"Content-Type": "application/json"})  # fmt: skip
    assert answer.status_code == 422 and "valid Unicode" in answer.text


def test_a_parsers_facts_refuse_a_prefix(engine):
    parser = replace(engine.facts, task=TaskConfig(name="parse"))
    with pytest.raises(BadRequest, match="a prefix is for translation, not for a parse model"):
        parser.guided_lengths(["(S"], None)
    # "the", then "dog" a piece a letter after a lone word start, and the end
    assert engine.facts.guided_lengths(["the dog", ""], None) == [6, 1]


def test_a_prefix_over_the_models_positions_letter_by_letter_is_413_before_decoding(tmp_path):
    """Learned positions (32): a prefix of few subwords whose unfinished word could take a piece
    a letter past them is refused at the door, 413, as the decoder would refuse it, instead of
    failing the batch it was merged into."""
    from transduce.config import DecodeConfig
    from transduce.decoding.translate import Translator
    from transduce.serve.engine import Engine

    from .conftest import tiny_model, toy_vocab

    vocab = toy_vocab(tmp_path)
    learned = tiny_model(vocab_size=vocab.size, positions="learned", max_positions=32,
                         dtype=torch.float32)  # fmt: skip
    engine = Engine(Translator(learned, vocab, DecodeConfig(beam_size=2, max_len_b=5), CPU), "l")
    prefix = "the " + "children" * 5  # 2 pieces and 40 letters
    with Background(engine, LOOPBACK) as url, httpx.Client(base_url=url) as client:
        answer = client.post("/v1/translate", json={"text": "the dog", "prefix": prefix})
        assert answer.status_code == 413, answer.text
        assert "the prefix may take 43 subwords (EOS included); at most 30" in answer.text
        fine = client.post("/v1/translate", json={"text": "the dog", "prefix": "the chi"})
        assert fine.status_code == 200 and fine.json()["translations"][0]["text"].startswith(
            "the chi"
        )


# --- terms ---


def _with_terms(i: int) -> dict:
    """Requests of each shape: one text with terms or without, several with term lists."""
    texts, words = sentences(1 + i % 3, seed=i), sentences(3, seed=70 + i)
    if i % 4 == 0:
        return {"text": texts[0], "terms": [words[0].split()[0]], "beam_size": 3}
    if i % 4 == 1:
        return {"text": texts[0], "beam_size": 3}
    lists = [[], *([w.split()[-1]] for w in words)][: len(texts)]
    return {"texts": texts, "term_lists": lists, "beam_size": 3}


def test_merged_requests_with_terms_get_what_offline_translation_gives(engine, served):
    """Eight clients at once, with terms and without: each answer is its texts' translations
    under its own terms, as `Translator` gives them alone, each holding its terms."""
    requests = [_with_terms(i) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda body: translated(served, body), requests))
    decode = replace(engine.translator.decode, beam_size=3, terms_beam=3)
    for body, answer in zip(requests, answers, strict=True):
        texts = body.get("texts") or [body["text"]]
        terms = body.get("term_lists") or ([body["terms"]] if "terms" in body else None)
        offline = engine.translator.translate(texts, decode, terms=terms)
        for phrases, got, want in zip(terms or [[]] * len(texts), answer["translations"],
                                      offline, strict=True):  # fmt: skip
            assert got["text"] == want[0][0] and got["score"] == pytest.approx(want[0][1])
            assert all(phrase in got["text"].split() for phrase in phrases)
            assert got["missing_terms"] == (0 if terms and any(terms) else None)
    assert any(body.get("terms") for body in requests)


def test_a_parsers_facts_refuse_terms_and_count_them_with_a_prefix(engine):
    parser = replace(engine.facts, task=TaskConfig(name="parse"))
    with pytest.raises(BadRequest, match="terms are for translation, not for a parse model"):
        parser.guided_lengths(None, [["(S"]])
    counts = engine.facts.guided_lengths(["the dog", ""], [["grass", "the dog"], []])
    pieces = len(engine.facts.vocab.encode(["grass"])[0]) + 2  # "the dog": two
    assert counts == [6 + pieces, 1]


def test_a_glossary_gives_each_text_the_terms_it_uses(engine, served):
    """`glossary` with `texts`: each text that uses a source phrase (any case) holds its
    translation, beside its own terms, as `Translator` gives it with those terms."""
    body = {"texts": ["the Dog runs", "green grass", "the children"], "beam_size": 3,
            "glossary": {"dog": "outside", "children": "green grass"},
            "term_lists": [[], [], ["playing"]]}  # fmt: skip
    answer = translated(served, body)
    terms = [["outside"], [], ["playing", "green grass"]]
    decode = replace(engine.translator.decode, beam_size=3, terms_beam=3)
    offline = engine.translator.translate(body["texts"], decode, terms=terms)
    texts = [t["text"] for t in answer["translations"]]
    assert texts == [hyps[0][0] for hyps in offline]
    assert "outside" in texts[0].split() and "green grass" in texts[2]


def test_terms_widen_the_models_beam_unless_one_is_asked_for(engine, served):
    """No `beam_size`: a text with terms is searched with the run's `terms_beam` (8, within the
    server's max_beam), not its beam of 2; an asked-for beam is every text's."""
    text, terms = "the dog runs across the grass", ["children", "green"]
    assert engine.translator.decode.terms_beam == 8
    for asked, beam in [(None, 8), (2, 2)]:
        body = {"text": text, "terms": terms, **({"beam_size": asked} if asked else {})}
        answer = translated(served, body)["translations"][0]
        decode = replace(engine.translator.decode, beam_size=beam, terms_beam=0)
        want = engine.translator.translate([text], decode, terms=[terms])[0][0]
        assert (answer["text"], answer["score"]) == (want[0], pytest.approx(want[1]))


def test_candidates_say_how_many_terms_they_lack(engine):
    """With terms and a short limit, the n best end with those that lack terms (ended by the
    limit), each saying how many; a request without terms says nothing of them."""
    decode = replace(engine.translator.decode, beam_size=4, n_best=4, max_len_b=2, terms_beam=4)
    terms = [["grass", "children"], ["outside"]]
    work = TranslateWork(["the dog runs", "green grass"], decode, False, terms=terms)
    for phrases, line in zip(terms, engine.translate([work])[0], strict=True):
        missing = [c["missing_terms"] for c in line]
        assert missing == sorted(missing) and missing[0] == 0 and missing[-1] > 0
        for c in line:
            assert c["missing_terms"] == sum(p not in c["text"].split() for p in phrases)
    plain = engine.translate([TranslateWork(["the dog runs"], decode, False)])[0][0]
    assert all("missing_terms" not in c for c in plain)
