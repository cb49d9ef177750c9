"""A bounded load on loopback (the small version of benchmarks/serve_load.py): 200 concurrent
clients, 600 requests, decoded as `transduce serve` decodes by default (in a process of its
own); every one is answered, none hangs, each answer is what offline translation gives, and the
worker decoded them in batches."""

from __future__ import annotations

import pytest

httpx = pytest.importorskip("httpx", reason="the dev extra: pip install -e '.[dev]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

from transduce.serve.load import run_load  # noqa: E402
from transduce.serve.server import Background  # noqa: E402
from transduce.serve.settings import ServeSettings  # noqa: E402
from transduce.serve.worker import DecoderProcess  # noqa: E402

from .conftest import save_toy_model  # noqa: E402
from .serving import DECODE, metric, sentences  # noqa: E402

CLIENTS, REQUESTS = 200, 600


def test_200_clients_get_every_answer_and_the_offline_translations(tmp_path):
    from transduce.decoding.translate import Translator

    model = save_toy_model(tmp_path, DECODE)
    lines = sentences(REQUESTS, seed=3)
    offline = [hyps[0][0] for hyps in Translator.load(model).translate(lines)]
    decoder = DecoderProcess(model, threads=1)
    try:
        with Background(decoder, ServeSettings(port=0)) as url:
            bodies = [{"text": line} for line in lines]
            result = run_load(url, "/v1/translate", bodies, CLIENTS, 60)
            text = httpx.get(url + "/metrics").text
    finally:
        decoder.close()
    assert dict(result.statuses) == {200: REQUESTS}  # none lost, none refused, none timed out
    assert [answer["translations"][0]["text"] for answer in result.answers] == offline
    assert result.latency(0.99) < 60
    batches = metric(text, "transduce_batch_sentences_count")
    assert metric(text, "transduce_batch_sentences_sum") == REQUESTS
    assert batches < REQUESTS / 5  # decoded together, several requests a batch on average
