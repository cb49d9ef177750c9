"""`POST /v1/score` against a real uvicorn on loopback: what `transduce score` gives, for requests
alone or merged; its limits and bad input answered with their status while the server serves."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

httpx = pytest.importorskip("httpx", reason="the dev extra: pip install -e '.[dev]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

from transduce.config import TaskConfig  # noqa: E402
from transduce.serve.engine import Engine  # noqa: E402
from transduce.serve.server import Background  # noqa: E402
from transduce.serve.settings import ServeSettings  # noqa: E402
from transduce.tasks import get_task  # noqa: E402

from .conftest import toy_translator  # noqa: E402
from .serving import metric, sentences, toy_engine  # noqa: E402

LOOPBACK = ServeSettings(port=0, batch_wait_ms=50)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return toy_engine(tmp_path_factory.mktemp("serve-score"))


@pytest.fixture(scope="module")
def served(engine):
    with Background(engine, LOOPBACK) as url:
        yield url


def _pairs(n: int, seed: int) -> list[dict]:
    return [
        {"source": source, "target": target}
        for source, target in zip(sentences(n, seed), sentences(n, seed + 100), strict=True)
    ]


def test_concurrent_requests_get_what_offline_scoring_gives(engine, served):
    """Eight clients at once (merged into shared calls by the batcher): each answer is, pair for
    pair and in order, what `Translator.score` gives its pairs alone."""
    requests = [_pairs(1 + i % 3, seed=i) for i in range(8)]

    def post(pairs):
        with httpx.Client(base_url=served) as client:
            return client.post("/v1/score", json={"pairs": pairs}).json()

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(post, requests))
    for pairs, answer in zip(requests, answers, strict=True):
        offline = engine.translator.score(
            [p["source"] for p in pairs], [p["target"] for p in pairs]
        )
        assert len(answer["scores"]) == len(pairs) and answer["model"] == "toy.pt"
        for got, want in zip(answer["scores"], offline, strict=True):
            assert got["log_prob"] == pytest.approx(want.log_prob, abs=1e-4)
            assert (got["tokens"], got["unknown"]) == (want.tokens, want.unknown)
            assert got["per_token"] == pytest.approx(want.per_token, abs=1e-4)
        assert answer["time_ms"] > 0
    with httpx.Client(base_url=served) as client:
        text = client.get("/metrics").text
        assert metric(text, "transduce_requests_total", route="/v1/score", status="200") >= 8
        assert "/v1/score" in client.get("/openapi.json").json()["paths"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b'{"pairs": []}', 422),
        (b'{"pairs": [{"source": "the dog"}]}', 422),  # no target
        (b'{"pairs": [{"source": "the dog", "target": ""}]}', 422),
        (b'{"pairs": [{"source": "the dog", "target": "runs", "weight": 1}]}', 422),
        (b'{"pairs": [["the dog", "runs"]]}', 422),
        (b'{"text": "the dog"}', 422),
        (b'{"pairs": [{"source": "the dog", "target": "runs"}]', 400),
    ],
)
def test_bad_input_is_answered_with_its_status_and_the_server_keeps_serving(served, body, status):
    with httpx.Client(base_url=served) as client:
        answer = client.post(
            "/v1/score", content=body, headers={"content-type": "application/json"}
        )
        assert answer.status_code == status and answer.json()["detail"]
        good = client.post("/v1/score", json={"pairs": _pairs(1, seed=0)})
        assert good.status_code == 200


def test_too_many_pairs_or_a_side_too_long_get_413_naming_it(engine):
    settings = replace(LOOPBACK, max_sentences=2, max_sentence_tokens=12)
    long = " ".join(["children"] * 30)
    with Background(engine, settings) as url, httpx.Client(base_url=url) as client:
        three = client.post("/v1/score", json={"pairs": _pairs(3, seed=1)})
        assert three.status_code == 413 and three.json()["detail"] == "3 pairs; at most 2"
        pairs = [{"source": "the dog", "target": "runs"}, {"source": "the dog", "target": long}]
        answer = client.post("/v1/score", json={"pairs": pairs})
        assert answer.status_code == 413
        assert answer.json()["detail"].startswith("target 2 of 2 has")
        source = client.post("/v1/score", json={"pairs": [{"source": long, "target": "runs"}]})
        assert source.status_code == 413 and source.json()["detail"].startswith("the sentence")
        assert client.post("/v1/score", json={"pairs": _pairs(2, seed=1)}).status_code == 200


def test_a_parsers_malformed_tree_is_422_and_its_good_trees_are_scored(tmp_path):
    translator = toy_translator(tmp_path)
    translator.task = get_task(TaskConfig(name="parse", tags=False))
    engine = Engine(translator, "parser")
    good = {"source": "the dog", "target": "(S (NP (DT the) (NN dog)))"}
    with Background(engine, LOOPBACK) as url, httpx.Client(base_url=url) as client:
        broken = {"source": "the dog", "target": "(S (NP (DT the) (NN dog))"}
        answer = client.post("/v1/score", json={"pairs": [good, broken]})
        assert answer.status_code == 422 and "target line 2" in answer.json()["detail"]
        other = {"source": "the cat", "target": good["target"]}
        answer = client.post("/v1/score", json={"pairs": [other]})
        assert (
            answer.status_code == 422 and "but its sentence is 'the cat'" in answer.json()["detail"]
        )
        answer = client.post("/v1/score", json={"pairs": [good]})
        assert answer.status_code == 200
    offline = translator.score([good["source"]], [good["target"]])[0]
    assert answer.json()["scores"][0]["log_prob"] == pytest.approx(offline.log_prob, abs=1e-4)
