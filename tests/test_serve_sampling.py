"""`sampling` of `POST /v1/translate` against a real uvicorn on loopback: the samples `transduce
translate --sampling` draws for the same lines and seed, whatever else is being served; bad
options answered 422 while the server serves."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

httpx = pytest.importorskip("httpx", reason="the dev extra: pip install -e '.[dev]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

from transduce.decoding.sampling import Sampling  # noqa: E402
from transduce.serve.server import Background  # noqa: E402
from transduce.serve.settings import ServeSettings  # noqa: E402

from .serving import sentences, toy_engine, translated  # noqa: E402

LOOPBACK = ServeSettings(port=0, batch_wait_ms=50, max_beam=6)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return toy_engine(tmp_path_factory.mktemp("serve-sampling"))


@pytest.fixture(scope="module")
def served(engine):
    with Background(engine, LOOPBACK) as url:
        yield url


def _offline(engine, texts, sampling, prefixes=None):
    return engine.translator.translate(texts, sampling=sampling, prefixes=prefixes)


def test_samples_are_what_the_command_line_draws_whatever_else_is_served(engine, served):
    """Sampled requests among beam-search ones, eight clients at once: each sampled answer is,
    sample for sample, what `Translator.translate(..., sampling=)` draws for its lines and seed
    alone (never merged with another request's lines), best score first."""
    options = [{"samples": 3, "seed": i, "top_k": 5 * (i % 2), "temperature": 0.8 + i / 10}
               for i in range(4)]  # fmt: skip
    bodies = [{"texts": sentences(2, seed=i), "sampling": o} for i, o in enumerate(options)]
    bodies += [{"texts": sentences(3, seed=10 + i), "n_best": 2} for i in range(4)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda body: translated(served, body), bodies))
    for body, answer in zip(bodies[:4], answers[:4], strict=True):
        sampling = Sampling(**body["sampling"])
        offline = _offline(engine, body["texts"], sampling)
        for got, want in zip(answer["translations"], offline, strict=True):
            assert [c["text"] for c in got["n_best"]] == [text for text, _ in want]
            assert [c["score"] for c in got["n_best"]] == pytest.approx([s for _, s in want])
            assert got["text"] == want[0][0] and len(got["n_best"]) == 3
    decode = replace(engine.translator.decode, n_best=2)
    for body, answer in zip(bodies[4:], answers[4:], strict=True):
        want = engine.translator.translate(body["texts"], decode)
        assert [[c["text"] for c in t["n_best"]] for t in answer["translations"]] == [
            [text for text, _ in hyps] for hyps in want
        ]


def test_a_seed_draws_the_same_samples_again_and_another_seed_others(served):
    body = {"text": "the dog runs across the green grass", "sampling": {"samples": 4, "seed": 7}}
    first, again = translated(served, body), translated(served, body)
    assert first["translations"] == again["translations"]
    other = translated(served, {**body, "sampling": {"samples": 4, "seed": 8}})
    assert other["translations"] != first["translations"]


def test_samples_start_with_the_prefix(engine, served):
    body = {"text": "the dog runs", "prefix": "green gr", "sampling": {"samples": 3, "seed": 1}}
    answer = translated(served, body)
    texts = [c["text"] for c in answer["translations"][0]["n_best"]]
    assert all(text.startswith("green gr") for text in texts)
    want = _offline(engine, ["the dog runs"], Sampling(samples=3, seed=1), ["green gr"])[0]
    assert texts == [text for text, _ in want]


@pytest.mark.parametrize(
    ("sampling", "extra", "says"),
    [
        ({"samples": 7}, {}, "samples=7 exceeds the limit 6"),
        ({"samples": 0}, {}, "greater than or equal to 1"),
        ({"top_p": 0.0}, {}, "greater than 0"),
        ({"top_p": 1.5}, {}, "less than or equal to 1"),
        ({"temperature": -1.0}, {}, "greater than 0"),
        ({"seed": -1}, {}, "greater than or equal to 0"),
        ({"top_k": 2.5}, {}, "valid integer"),
        ({"nucleus": 0.9}, {}, "Extra inputs"),
        ({}, {"beam_size": 3}, "`sampling.samples` counts the outputs"),
        ({}, {"n_best": 2}, "`sampling.samples` counts the outputs"),
        ({}, {"alignments": True}, "leave out `sampling`"),
    ],
)  # fmt: skip
def test_bad_sampling_options_are_answered_422_and_the_server_goes_on(
    served, sampling, extra, says
):
    with httpx.Client(base_url=served) as client:
        body = {"text": "the dog", "sampling": sampling, **extra}
        answer = client.post("/v1/translate", json=body)
        assert answer.status_code == 422, answer.text
        assert says in answer.text
        assert client.post("/v1/translate", json={"text": "the dog"}).status_code == 200


def test_infinite_temperature_is_refused(served):
    raw = b'{"text": "the dog", "sampling": {"temperature": Infinity}}'
    with httpx.Client(base_url=served) as client:
        answer = client.post("/v1/translate", content=raw,
                             headers={"Content-Type": "application/json"})  # fmt: skip
    assert answer.status_code in (400, 422), answer.text
