"""`transduce serve --model A --model B`: an ensemble served as `transduce translate` decodes it,
described as one (`GET /v1/models`), its attention the members' mean; and an ensemble whose
models attend in different shapes, which has no attention to show, answers attention and
alignments with 422 naming why, before anything is decoded, and serves translations on."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="the dev extra: pip install -e '.[dev]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

from transduce.decoding.translate import Translator  # noqa: E402
from transduce.serve.engine import BadRequest, Engine, TranslateWork  # noqa: E402
from transduce.serve.server import Background  # noqa: E402
from transduce.serve.settings import ServeSettings  # noqa: E402
from transduce.serve.worker import DecoderProcess  # noqa: E402
from transduce.viz.alignment import pharaoh, translate_with_alignments  # noqa: E402
from transduce.viz.capture import sentence_attention  # noqa: E402
from transduce.viz.page import page_data  # noqa: E402

from .conftest import save_seeded_model, toy_vocab  # noqa: E402
from .serving import DECODE, metric, sentences  # noqa: E402

LOOPBACK = ServeSettings(port=0)
LINES = sentences(5, seed=3)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Three models over one vocabulary: two of one shape, one shallower."""
    folder = tmp_path_factory.mktemp("ensemble")
    vocab = toy_vocab(folder)
    return {
        "a": save_seeded_model(folder / "a.pt", vocab, 1, decode=DECODE),
        "b": save_seeded_model(folder / "b.pt", vocab, 2, decode=replace(DECODE, beam_size=3)),
        "shallow": save_seeded_model(folder / "shallow.pt", vocab, 3, n_layers=1),
    }


def test_an_ensemble_is_served_as_translate_decodes_it_with_its_mean_attention(models):
    pair = [models["a"], models["b"]]
    offline = Translator.load(pair)
    engine = Engine.load(pair)
    assert engine.facts.no_attention is None
    with Background(engine, LOOPBACK) as url, httpx.Client(base_url=url, timeout=60) as client:
        (described,) = client.get("/v1/models").json()["models"]
        assert described["name"] == "a.pt+b.pt" and described["members"] == ["a.pt", "b.pt"]
        assert described["attention"] is True
        assert described["decode"]["beam_size"] == DECODE.beam_size  # the first model's
        body = {"texts": LINES, "n_best": 2, "alignments": True}
        answer = client.post("/v1/translate", json=body)
        assert answer.status_code == 200, answer.text
        expected = offline.translate(LINES, replace(DECODE, n_best=2))
        got = answer.json()["translations"]
        assert [[o["text"] for o in t["n_best"]] for t in got] == [
            [text for text, _ in hyps] for hyps in expected
        ]
        aligned = translate_with_alignments(offline, LINES)
        assert [t["alignment"] for t in got] == [pharaoh(links) for _, links in aligned]
        body = {"text": LINES[0], "target": "the dog", "layer": 1}
        attention = client.post("/v1/attention", json=body)
        assert attention.status_code == 200, attention.text
        mean = sentence_attention(offline, LINES[0], "the dog", merge_words=True)
        expected_views = json.loads(json.dumps(page_data(mean, 1)))
        assert {key: attention.json()[key] for key in expected_views} == expected_views
    assert offline.translate(LINES) != Translator.load(models["a"]).translate(LINES)  # b counts


def test_an_ensemble_of_different_shapes_refuses_attention_and_serves_translations(models):
    pair = [models["a"], models["shallow"]]
    engine = Engine.load(pair)
    assert "attend differently" in engine.facts.no_attention
    with pytest.raises(BadRequest, match="attend differently"):  # a caller without the routes
        engine.translate([TranslateWork(LINES[:1], DECODE, alignments=True)])
    with Background(engine, LOOPBACK) as url, httpx.Client(base_url=url, timeout=60) as client:
        (described,) = client.get("/v1/models").json()["models"]
        assert described["attention"] is False and described["members"] == ["a.pt", "shallow.pt"]
        refusals = [
            client.post("/v1/attention", json={"text": LINES[0]}),
            client.post("/v1/attention", json={"text": LINES[0], "layer": 0}),
            client.post("/v1/translate", json={"texts": LINES, "alignments": True}),
        ]
        for refused in refusals:
            assert refused.status_code == 422, refused.text
            assert "models attend differently" in refused.json()["detail"]
        batches = metric(client.get("/metrics").text, "transduce_batch_sentences_count")
        assert batches == 0  # refused before any decoding
        answer = client.post("/v1/translate", json={"texts": LINES})
        assert answer.status_code == 200, answer.text
    expected = [hyps[0][0] for hyps in Translator.load(pair).translate(LINES)]
    assert [t["text"] for t in answer.json()["translations"]] == expected


def test_the_decoding_process_serves_an_ensemble(models):
    pair = [models["a"], models["b"]]
    decoder = DecoderProcess(pair, threads=1)
    try:
        assert decoder.facts.name == "a.pt+b.pt" and decoder.facts.no_attention is None
        with Background(decoder, LOOPBACK) as url, httpx.Client(base_url=url, timeout=60) as c:
            answer = c.post("/v1/translate", json={"texts": LINES})
            assert answer.status_code == 200, answer.text
    finally:
        decoder.close()
    expected = [hyps[0][0] for hyps in Translator.load(pair).translate(LINES)]
    assert [t["text"] for t in answer.json()["translations"]] == expected


def test_an_ensemble_in_int8_is_served_as_translate_int8_decodes_it(models, monkeypatch):
    """Every member's products in int8 (the toy's too, the threshold lowered), and the answers
    those of `Translator.load(pair, int8=True)`, not float32's."""
    from transduce.models import int8

    if not int8.available:
        pytest.skip("this PyTorch has no oneDNN int8 products")
    monkeypatch.setattr(int8, "MIN_MULTIPLY_ADDS", 0)
    pair, lines = [models["a"], models["b"]], sentences(12, seed=5)
    engine = Engine.load(pair, int8=True)
    with Background(engine, LOOPBACK) as url, httpx.Client(base_url=url, timeout=60) as client:
        answer = client.post("/v1/translate", json={"texts": lines, "n_best": 2})
        assert answer.status_code == 200, answer.text
    quantized = {id(weight) for weight, _, _ in engine.translator.int8_weights.values()}
    for member in engine.translator.model.members:
        assert id(member.output_weight) in quantized
    offline = Translator.load(pair, int8=True).translate(lines, replace(DECODE, n_best=2))
    float32 = Translator.load(pair).translate(lines, replace(DECODE, n_best=2))
    got = [[(o["text"], o["score"]) for o in t["n_best"]] for t in answer.json()["translations"]]
    assert got == [[(text, score) for text, score, *_ in hyps] for hyps in offline]
    assert got != [[(text, score) for text, score, *_ in hyps] for hyps in float32]


def test_one_model_is_served_as_itself_and_models_of_one_file_name_by_their_folders(
    models, tmp_path
):
    engine = Engine.load([models["a"]])
    assert engine.name == "a.pt" and engine.members == []
    with Background(engine, LOOPBACK) as url:
        (described,) = httpx.get(url + "/v1/models").json()["models"]
    assert described["name"] == "a.pt" and "members" not in described
    assert described["max_positions"] is None  # a field that is None is still said
    vocab = toy_vocab(tmp_path)
    paths = []
    for run in ("x", "y"):
        (tmp_path / run).mkdir()
        paths.append(save_seeded_model(tmp_path / run / "average.pt", vocab, 1))
    assert Engine.load(paths).members == ["x/average.pt", "y/average.pt"]


def test_the_page_says_an_ensemble_without_attention_has_none_and_translates(
    models, browser, tmp_path
):
    engine = Engine.load([models["a"], models["shallow"]])
    expected = engine.translator.translate([LINES[0]])[0][0][0]
    with Background(engine, LOOPBACK) as url:
        page = browser.new_page(viewport={"width": 1100, "height": 600})
        errors, asked = [], []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("request", lambda request: asked.append(request.url.removeprefix(url)))
        page.goto(url + "/")
        note = page.inner_text("#no-attention")
        assert note.startswith("Attention is not drawn: the ensemble's models attend differently")
        page.fill("#text", LINES[0])
        page.click("#go")
        page.wait_for_selector("#status >> text=a.pt+shallow.pt")
        assert page.inner_text("#translations li .output") == expected
        page.click("#translations li")  # a click asks for nothing it cannot have
        page.screenshot(path=str(tmp_path / "ensemble.png"), full_page=True)
        assert page.is_hidden("#attention")
        assert "error" not in (page.get_attribute("#status", "class") or "")
    assert errors == [] and "/v1/attention" not in asked and "/v1/translate" in asked
