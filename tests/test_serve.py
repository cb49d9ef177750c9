"""`transduce serve` against a real uvicorn on loopback: concurrent clients get what offline
translation gives, the other endpoints answer as documented, and every limit is answered with
its status and a JSON message, after which the server keeps serving."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
import torch

httpx = pytest.importorskip("httpx", reason="the dev extra: pip install -e '.[dev]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

from transduce.serve.batcher import Batcher  # noqa: E402
from transduce.serve.engine import AttentionWork, BadRequest, TranslateWork  # noqa: E402
from transduce.serve.server import Background  # noqa: E402
from transduce.serve.settings import ServeSettings  # noqa: E402
from transduce.viz.alignment import pharaoh, translate_with_alignments  # noqa: E402
from transduce.viz.capture import sentence_attention  # noqa: E402
from transduce.viz.page import page_data  # noqa: E402

from .conftest import save_toy_model  # noqa: E402
from .serving import DECODE, Gate, metric, sentences, toy_engine  # noqa: E402


@pytest.mark.parametrize(
    "change", [{"max_beam": 0}, {"request_timeout_s": -1.0}, {"port": 65536}, {"port": -1}]
)
def test_a_limit_that_is_not_positive_or_a_port_out_of_range_is_refused_naming_it(change):
    from transduce.config import ConfigError

    with pytest.raises(ConfigError, match=rf"serve\.{next(iter(change))} must be"):
        ServeSettings(**change)
    assert ServeSettings(port=0).port == 0 and ServeSettings(port=65535).port == 65535


LOOPBACK = ServeSettings(port=0)
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return toy_engine(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def served(engine):
    """The server most tests share; it waits 50 ms for company so concurrent requests meet."""
    with Background(engine, replace(LOOPBACK, batch_wait_ms=50)) as url:
        yield url


def _good(client: httpx.Client) -> None:
    """A well-formed request still works."""
    answer = client.post("/v1/translate", json={"text": "the dog runs"})
    assert answer.status_code == 200 and answer.json()["translations"][0]["text"] != ""


# (beam, n_best): requests with different settings in the same moment, grouped by settings.
SETTINGS = [(2, 2), (1, 1), (3, 1)]


def test_concurrent_clients_get_what_offline_translate_gives(engine, served):
    requests = [(sentences(1 + i % 3, seed=i), *SETTINGS[i % len(SETTINGS)]) for i in range(24)]
    start = threading.Barrier(12)
    before = httpx.get(served + "/metrics").text

    def ask(i: int):
        lines, beam, n_best = requests[i]
        with httpx.Client(base_url=served, timeout=60) as client:
            if i < 12:
                start.wait()  # the first twelve leave together
            body = {"texts": lines, "beam_size": beam, "n_best": n_best}
            return client.post("/v1/translate", json=body)

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(ask, range(len(requests))))
    for (lines, beam, n_best), answer in zip(requests, answers, strict=True):
        assert answer.status_code == 200
        offline = engine.translator.translate(lines, replace(DECODE, beam_size=beam, n_best=n_best))
        served_out = [
            [(c["text"], c["score"]) for c in t["n_best"]] for t in answer.json()["translations"]
        ]
        assert [[text for text, _ in hyps] for hyps in served_out] == [
            [text for text, _ in hyps] for hyps in offline
        ]
        # Scores equal to float32 rounding: a batch's padding changes the order of float sums,
        # as it does between two offline runs that batch a sentence with different company.
        for ours, theirs in zip(served_out, offline, strict=True):
            assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], abs=1e-4)
    text = httpx.get(served + "/metrics").text
    batches = metric(text, "transduce_batch_sentences_count")
    assert batches - (metric(before, "transduce_batch_sentences_count") or 0) < len(requests)
    decoded = metric(text, "transduce_batch_sentences_sum")
    decoded -= metric(before, "transduce_batch_sentences_sum") or 0
    assert decoded == sum(len(lines) for lines, _, _ in requests)  # every sentence, once


def test_the_engine_packs_its_weights_once_not_once_per_request(engine, monkeypatch):
    """The server's translator keeps its weights packed for oneDNN from request to request
    (packing them again made a one-sentence request 1.14-1.31x slower), with equal output."""
    from transduce.models import matmul

    monkeypatch.setattr(matmul, "MKL_WEIGHT_ENTRIES", 0)  # the toy's weights would all take MKL
    if not matmul._can_pack:
        pytest.skip("this torch's oneDNN route does not pack weights")
    old = matmul.use_onednn(True)  # on Intel's CPUs MKL's route is the default: it packs nothing
    try:
        work = TranslateWork(sentences(2, seed=7), DECODE, alignments=False)
        first = engine.translate([work])
        store = engine.translator.packed_weights
        assert store, "the weights were not kept packed"
        packed = {key: entry[2] for key, entry in store.items()}
        assert engine.translate([work]) == first
        assert len(store) == len(packed)  # nothing new packed, nothing more held
        assert all(store[key][2] is tensor for key, tensor in packed.items())  # the same copies
    finally:
        matmul.use_onednn(old)


def test_the_engine_decodes_with_the_precision_asked_and_refuses_an_impossible_one_at_start(
    tmp_path, monkeypatch
):
    """`serve --precision`: the requests' decoding settings carry it; one this CPU cannot run
    stops the server before it listens, not at its first request."""
    from transduce.config import ConfigError
    from transduce.models import bf16_decoding
    from transduce.serve.engine import Engine

    path = save_toy_model(tmp_path, DECODE)
    assert Engine.load(path).facts.decode.precision == DECODE.precision  # the run's
    engine = Engine.load(path, precision="fp32")
    assert engine.facts.decode.precision == "fp32"
    assert engine.facts.decode_config(None, 1, None).precision == "fp32"
    monkeypatch.setattr(bf16_decoding, "_avx512_bf16", False)
    monkeypatch.setattr(bf16_decoding, "_amx", False)
    with pytest.raises(ConfigError, match="needs bfloat16 products in hardware"):
        Engine.load(path, precision="bf16")


def test_the_answer_carries_the_best_its_n_best_the_model_and_the_time(served):
    with httpx.Client(base_url=served) as client:
        answer = client.post("/v1/translate", json={"text": "the dog runs", "n_best": 2}).json()
    assert answer["model"] == "toy.pt" and answer["time_ms"] > 0
    (translation,) = answer["translations"]
    assert len(translation["n_best"]) == 2
    assert translation["n_best"][0]["score"] >= translation["n_best"][1]["score"]
    assert (translation["text"], translation["score"]) == (
        translation["n_best"][0]["text"],
        translation["n_best"][0]["score"],
    )


def test_alignments_are_those_of_translate_with_alignments(engine, served):
    lines = sentences(4, seed=7)
    with httpx.Client(base_url=served) as client:
        answer = client.post("/v1/translate", json={"texts": lines, "alignments": True}).json()
    offline = translate_with_alignments(engine.translator, lines)
    assert [(t["text"], t["alignment"]) for t in answer["translations"]] == [
        (text, pharaoh(pairs)) for text, pairs in offline
    ]


def test_attention_gives_the_weights_the_attention_page_draws(engine, served):
    sentence = "the children playing outside"
    with httpx.Client(base_url=served) as client:
        answer = client.post("/v1/attention", json={"text": sentence, "layer": 1}).json()
    expected = page_data(sentence_attention(engine.translator, sentence, merge_words=True), 1)
    assert {key: answer[key] for key in expected} == json.loads(json.dumps(expected))
    assert answer["model"] == "toy.pt" and set(answer["views"]) == {"encoder", "decoder", "cross"}


def test_each_of_the_n_best_is_aligned_with_its_own_words(engine):
    # guards each candidate's alignment being that of its own words, not the best's
    lines = sentences(8, seed=7)
    (found,) = engine.translate([TranslateWork(lines, replace(DECODE, n_best=2), True)])
    for outputs in found:
        for output in outputs:  # each target word has one link: numbered as its words are
            targets = sorted(int(link.split("-")[1]) for link in output["alignment"].split())
            assert targets == list(range(len(output["text"].split())))
    assert any(len({len(o["text"].split()) for o in outputs}) == 2 for outputs in found)


def test_attention_translates_with_the_requests_own_beam(engine, served):
    # guards the attention request's beam_size reaching the search that makes its translation
    sentence = "green dog dog"  # greedy and beam 2 (the run's) translate it differently
    greedy, beam = (
        engine.translator.translate([sentence], replace(DECODE, beam_size=b))[0][0][0]
        for b in (1, 2)
    )
    assert greedy != beam
    with httpx.Client(base_url=served) as client:
        for asked, expected in ((1, greedy), (None, beam)):
            body = {"text": sentence} | ({"beam_size": asked} if asked else {})
            answer = client.post("/v1/attention", json=body)
            assert answer.status_code == 200 and answer.json()["translation"] == expected


def test_a_line_is_counted_and_aligned_as_the_model_reads_it(engine):
    """A line's length is its subwords and EOS, the spaces around it left out as translation
    leaves them (the 413 limit and the queue count it so), and its alignment is that of the
    line without them."""
    (ids,) = engine.translator.vocab.encode(["the dog"])
    assert engine.facts.token_counts(["  the dog \t"]) == [len(ids) + 1]
    works = [TranslateWork([line], DECODE, alignments=True) for line in ("the dog", " the dog  ")]
    (bare,), (spaced,) = engine.translate(works[:1]), engine.translate(works[1:])
    assert spaced == bare and "alignment" in bare[0][0]


def test_a_requests_beam_is_the_one_n_best_must_fit(engine):
    """n_best is checked against the request's own beam when it names one (the run's is 2)."""
    assert engine.facts.decode_config(4, 3, None).beam_size == 4
    with pytest.raises(BadRequest, match="exceeds the beam size 1"):
        engine.facts.decode_config(1, 2, None)


def test_the_models_description_is_the_served_models_own(tmp_path):
    """`GET /v1/models` tells the model's own facts, each set off its default here: the task's
    metric (a parser's f1), the run's decoding settings, a learned table's last position, the
    device and the size."""
    from transduce.config import DecodeConfig, TaskConfig
    from transduce.decoding.translate import Translator
    from transduce.models import count_parameters
    from transduce.serve.engine import Engine
    from transduce.serve.schemas import ModelList
    from transduce.tasks import get_task

    from .conftest import save_toy_model

    decode = DecodeConfig(beam_size=3, alpha=0.8, max_len_b=7, n_best=2)
    translator = Translator.load(save_toy_model(tmp_path, decode), device="cpu")
    translator.task = get_task(TaskConfig(name="parse"))
    translator.model.config = replace(translator.model.config, positions="learned")
    translator.device = torch.device("cpu", 0)
    described = Engine(translator, "parser.pt").facts.description
    assert described == {
        "name": "parser.pt",
        "metric": "f1",
        "vocab_size": translator.vocab.size,
        "parameters": count_parameters(translator.model),
        "max_positions": translator.model.config.max_positions,
        "device": "cpu:0",
        "decode": {
            "beam_size": 3,
            "alpha": 0.8,
            "max_len_b": 7,
            "n_best": 2,
            "terms_beam": 8,
            "no_repeat_ngram": 0,
            "no_unk": False,
        },
        "attention": True,
    }
    assert described["parameters"] > 0
    ModelList(models=[described])  # the response's schema takes it


def test_attention_takes_the_asked_layer_its_pieces_and_a_target_without_spaces(engine):
    """The attention's work: pieces left unmerged when asked, layers 0 to the model's last
    accepted, and the sentence and a given target read without the spaces around them."""
    sentence = "the children playing outside"

    def work(**given) -> AttentionWork:
        fields = dict(text=sentence, target=None, decode=DECODE, merge_words=True, layer=None)
        return AttentionWork(**(fields | given))

    (pieces,) = engine.attention([work(merge_words=False, layer=1)])
    expected = page_data(sentence_attention(engine.translator, sentence, merge_words=False), 1)
    assert {key: pieces[key] for key in expected} == json.loads(json.dumps(expected))
    assert pieces != engine.attention([work(layer=1)])[0]  # "children" is more than one piece
    spaced, bare = (engine.attention([work(target=t)]) for t in ("  the dog \t", "the dog"))
    assert spaced == bare
    assert engine.attention([work(text=f" {sentence}  ")]) == engine.attention([work()])
    for layer in (2, -1):
        with pytest.raises(BadRequest, match=f"layer {layer} out of range: .* layers 0 to 1"):
            engine.attention([work(layer=layer)])


def test_the_serve_verb_hands_its_flags_to_the_decoder_and_the_server(monkeypatch):
    """`transduce serve`: the model, device, int8, threads, channel model and precision reach the
    decoding process (or the thread's engine and torch), every setting the server, and bad
    threads a message."""
    import transduce.serve.engine as engine_module
    import transduce.serve.server as server_module
    import transduce.serve.worker as worker_module
    from transduce.cli import main

    seen = {}
    monkeypatch.setattr(server_module, "serve", lambda engine, settings, quiet: seen.update(
        engine=engine, settings=settings, quiet=quiet))  # fmt: skip
    monkeypatch.setattr(worker_module, "DecoderProcess", lambda *given, channel, precision: (
        "process", given, channel, precision))  # fmt: skip
    monkeypatch.setattr(engine_module.Engine, "load", staticmethod(lambda *a: ("thread", a)))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: seen.update(threads=n))
    main(["-q", "serve", "--model", "m.pt", "--device", "cpu", "--int8", "--threads", "2",
          "--port", "8123", "--max-sentences", "7", "--batch-wait-ms", "3",
          "--precision", "fp32"])  # fmt: skip
    assert seen["engine"] == ("process", ([Path("m.pt")], "cpu", True, 2), None, "fp32")
    assert seen["quiet"]
    assert seen["settings"] == replace(ServeSettings(), port=8123, max_sentences=7, batch_wait_ms=3)
    main(["serve", "--model", "m.pt", "--decoder", "thread", "--threads", "3", "--channel", "r"])
    assert seen["engine"] == ("thread", ([Path("m.pt")], None, False, Path("r"), None))
    assert seen["threads"] == 3
    assert not seen["quiet"] and seen["settings"] == ServeSettings()
    main(["serve", "--model", "a.pt", "--model", "b.pt", "--channel", "r"])  # an ensemble
    assert seen["engine"] == (
        "process",
        ([Path("a.pt"), Path("b.pt")], None, False, None),
        Path("r"),
        None,
    )
    with pytest.raises(SystemExit, match="--threads must be at least 1, not 0"):
        main(["serve", "--model", "m.pt", "--threads", "0"])


def test_health_models_metrics_and_the_openapi_schema(served):
    with httpx.Client(base_url=served) as client:
        assert client.get("/health").json()["status"] == "ok"
        (model,) = client.get("/v1/models").json()["models"]
        assert model["name"] == "toy.pt" and model["decode"]["beam_size"] == DECODE.beam_size
        schema = client.get("/openapi.json").json()
        assert {"/v1/translate", "/v1/attention", "/health", "/metrics"} <= set(schema["paths"])
        assert "429" in schema["paths"]["/v1/translate"]["post"]["responses"]
        before = client.get("/metrics").text
        _good(client)
        after = client.get("/metrics").text
    counted = dict(name="transduce_requests_total", route="/v1/translate", status="200")
    assert metric(after, **counted) == (metric(before, **counted) or 0) + 1
    assert metric(after, "transduce_queue_sentences") == 0
    latency = "transduce_request_latency_seconds"
    assert metric(after, latency, route="/v1/translate", quantile="0.99") > 0
    assert metric(after, "transduce_batch_sentences_count") >= 1


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b'{"text": "the dog"', 400),  # malformed JSON
        (b'{"text": "the \xff dog"}', 400),  # invalid UTF-8
        (b'{"text": 5}', 422),  # wrong type
        (b'{"text": ""}', 422),  # empty
        (b'{"text": "   "}', 422),  # only spaces
        (b'{"texts": []}', 422),
        (b'{"texts": ["the dog", ""]}', 422),
        (b'{"text": "the dog", "texts": ["runs"]}', 422),  # both
        (b"{}", 422),  # neither
        (b'{"text": "the dog", "beam": 3}', 422),  # unknown field
        (b'{"text": "\\ud800"}', 422),  # a lone surrogate: valid JSON, not Unicode
        (b'{"text": "the dog", "beam_size": 2, "n_best": 3}', 422),
        (b'{"text": "the dog", "beam_size": 17}', 422),  # over max_beam
        (b'{"text": "the dog", "max_len_b": 257}', 422),  # over the settings' max_len_b
        (b'{"text": "the dog", "beam_size": "2"}', 422),
        (b'{"text": "the dog", "beam_size": 0}', 422),
        (b'{"text": "the dog", "alignments": "yes"}', 422),  # not a bool, though truthy
        (b'["the dog"]', 422),
        (("/v1/attention", b'{"text": "the dog", "layers": 1}'), 422),  # unknown field
        (("/v1/attention", b'{"text": "the dog", "beam_size": 0}'), 422),
        (("/v1/attention", b'{"text": "the dog", "layer": -1}'), 422),
        (("/v1/attention", b'{"text": "the dog", "merge_words": 1}'), 422),
        (("/v1/attention", b'{"text": "the dog", "target": " "}'), 422),
    ],
)
def test_bad_input_is_answered_with_its_status_and_the_server_keeps_serving(served, body, status):
    route, body = body if isinstance(body, tuple) else ("/v1/translate", body)
    with httpx.Client(base_url=served) as client:
        answer = client.post(route, content=body, headers={"content-type": "application/json"})
        assert answer.status_code == status
        assert isinstance(answer.json()["detail"], str) and answer.json()["detail"]
        _good(client)


def test_the_messages_of_malformed_bodies_say_what_is_wrong(served):
    with httpx.Client(base_url=served) as client:
        json_type = {"content-type": "application/json"}
        not_utf8 = client.post("/v1/translate", content=b'{"text": "\xff"}', headers=json_type)
        cut = client.post("/v1/translate", content=b'{"text": "the', headers=json_type)
        control = client.post("/v1/translate", content=b'{"text": "a\x01b"}', headers=json_type)
        digits = b'{"text": "a", "beam_size": ' + b"9" * 5000 + b"}"
        long_number = client.post("/v1/translate", content=digits, headers=json_type)
        deep = client.post("/v1/translate", content=b"[" * 100_000, headers=json_type)
        empty = client.post("/v1/translate", content=b"", headers=json_type)
    assert not_utf8.json()["detail"] == "the body is not valid UTF-8"
    assert cut.status_code == 400 and cut.json()["detail"].startswith(
        "malformed JSON at character 9"
    )
    assert control.json()["detail"].startswith("malformed JSON at character 11: Invalid control")
    assert long_number.json()["detail"] == "malformed JSON: a number too long to read"
    assert deep.json()["detail"] == "malformed JSON: nested too deeply"
    assert empty.json()["detail"] == "the body is empty: send a JSON object"
    assert {a.status_code for a in (control, long_number, deep, empty)} == {400}


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({"content-type": "application/x-www-form-urlencoded"}, "x-www-form-urlencoded"),  # curl -d
        ({"content-type": "text/plain"}, "Content-Type text/plain"),
        ({}, "no Content-Type"),
        ({"content-type": "application/json", "content-encoding": "gzip"}, "uncompressed"),
    ],
)
def test_a_body_not_sent_as_json_is_415_saying_so(served, headers, says):
    """`curl -d` without a JSON Content-Type was refused as a body of the wrong shape (422);
    a compressed body was read as if it were not."""
    with httpx.Client(base_url=served) as client:
        answer = client.post("/v1/translate", content=b'{"text": "the dog"}', headers=headers)
        assert answer.status_code == 415 and says in answer.json()["detail"]
        drawn = client.post("/v1/attention", content=b'{"text": "the dog"}', headers=headers)
        assert drawn.status_code == 415
        assert "application/json" in answer.json()["detail"] or "gzip" in answer.json()["detail"]
        json_like = {"content-type": "Application/vnd.api+JSON; charset=utf-8"}
        liked = client.post("/v1/translate", content=b'{"text": "the dog"}', headers=json_like)
        assert liked.status_code == 200
        elsewhere = client.post("/health", content=b"x", headers=headers)  # the router's to say
        assert elsewhere.status_code == 405
        _good(client)


def test_head_is_answered_wherever_get_is(served):
    with httpx.Client(base_url=served) as client:
        for path in ("/health", "/v1/models", "/metrics", "/"):
            head, get = client.head(path), client.get(path)
            assert (head.status_code, get.status_code) == (200, 200), path
            assert (
                head.content == b"" and head.headers["content-type"] == get.headers["content-type"]
            )
        assert client.head("/v1/translate").status_code == 405
        paths = client.get("/openapi.json").json()["paths"]
        assert list(paths["/health"]) == ["get"]  # one operation: no duplicate operationIds


def test_neither_text_nor_texts_is_named_as_such(served):
    with httpx.Client(base_url=served) as client:
        neither = client.post("/v1/translate", json={"beam_size": 2}).json()["detail"]
        both = client.post("/v1/translate", json={"text": "a", "texts": ["b"]}).json()["detail"]
    assert "give `text` (one sentence) or `texts` (a list)" in neither and "both" not in neither
    assert both.endswith("not both")


def test_an_attention_layer_out_of_range_is_refused_before_decoding(engine, monkeypatch):
    """The layer is checked against the model's before the sentence is decoded (it was after
    beam search, logged as a decoding failure)."""

    last = engine.facts.attention_layers - 1
    assert engine.attention([AttentionWork("the dog", None, DECODE, True, last)])  # the last one
    with pytest.raises(BadRequest, match="out of range"):  # called directly: still checked
        engine.attention([AttentionWork("the dog", None, DECODE, True, last + 1)])

    def never(works):
        raise AssertionError("decoded")

    monkeypatch.setattr(engine, "attention", never)
    with Background(engine, LOOPBACK) as url, httpx.Client(base_url=url) as client:
        answer = client.post("/v1/attention", json={"text": "the dog", "layer": last + 1})
    assert answer.status_code == 422
    assert (
        answer.json()["detail"]
        == f"layer {last + 1} out of range: the model has layers 0 to {last}"
    )


def test_a_failure_of_ours_is_a_500_naming_its_kind_and_the_server_keeps_serving(
    engine, monkeypatch
):
    def broken(works):
        raise RuntimeError("a bug of ours")

    with Background(engine, LOOPBACK) as url, httpx.Client(base_url=url) as client:
        with monkeypatch.context() as patch:
            patch.setattr(engine, "translate", broken)
            answer = client.post("/v1/translate", json={"text": "the dog"})
        assert answer.status_code == 500
        assert answer.json() == {"detail": "internal error: RuntimeError"}  # no internals leak
        _good(client)
        counted = metric(
            client.get("/metrics").text,
            "transduce_requests_total",
            route="/v1/translate",
            status="500",
        )
    assert counted == 1


def _posting(url: str, first_bytes: bytes, framing: bytes = b"Content-Length: 100\r\n"):
    """A raw connection that has sent a translate request's headers, the body framed by
    `framing` (by default: declared as 100 bytes), and `first_bytes` of that body."""
    host, port = url.removeprefix("http://").split(":")
    connection = socket.create_connection((host, int(port)), timeout=30)
    connection.sendall(
        b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + framing
        + b"\r\n"
        + first_bytes
    )
    return connection


def test_a_body_that_does_not_arrive_in_time_is_408_and_others_are_served_meanwhile(engine):
    """A Content-Length larger than what the client sends, or a body trickling in, held its
    request open for ever (and spent the decoding budget waiting): now 408 once
    `body_timeout_s` has passed since the body was first asked for."""
    settings = replace(LOOPBACK, body_timeout_s=1.0)
    with Background(engine, settings) as url, httpx.Client(base_url=url) as client:
        with _posting(url, b'{"text": "the') as short:
            started = time.monotonic()
            _good(client)  # the waiting body holds nobody else up
            answer = short.recv(4096).decode()
        assert answer.startswith("HTTP/1.1 408") and "did not arrive within 1.0 s" in answer
        assert 0.9 < time.monotonic() - started < 10
        _good(client)


def test_a_body_trickling_in_is_408_at_its_deadline_and_slow_decoding_is_not(engine, monkeypatch):
    """The body's time limit counts from its first part, however often more comes, and ends
    once the body is whole: a decoding slower than the limit is answered, not cut off."""
    settings = replace(LOOPBACK, body_timeout_s=1.0)
    real = engine.translate

    def slow(works):
        time.sleep(1.5)
        return real(works)

    with Background(engine, settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        with _posting(url, b"") as trickle:
            started = time.monotonic()
            trickle.setblocking(False)
            answer = b""
            while not answer and time.monotonic() - started < 5:
                try:
                    trickle.send(b" ")  # a byte every 0.2 s: never idle, never whole
                    answer = trickle.recv(4096)
                except BlockingIOError:
                    time.sleep(0.2)
                except OSError:
                    break
        assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 3
        monkeypatch.setattr(engine, "translate", slow)
        decoded = client.post("/v1/translate", json={"text": "the dog"})
        assert decoded.status_code == 200 and decoded.json()["translations"][0]["text"]


def test_a_chunked_body_past_the_limit_is_413_before_it_ends(engine):
    # guards the size limit counted as the body arrives, not once it is whole (held in memory)
    settings = replace(LOOPBACK, max_body_bytes=1000, body_timeout_s=5.0)
    with Background(engine, settings) as url:
        chunk = b"5dc\r\n" + b" " * 1500 + b"\r\n"  # 1500 bytes of a body that never ends
        with _posting(url, chunk, framing=b"Transfer-Encoding: chunked\r\n") as connection:
            started = time.monotonic()
            answer = connection.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413") and time.monotonic() - started < 4


def test_time_ms_counts_from_the_requests_arrival_its_body_included(engine):
    # guards the answer's time (and the time budget) starting when the request arrived
    body = b'{"text": "the dog"}'
    framing = b"Connection: close\r\nContent-Length: %d\r\n" % len(body)
    with Background(engine, LOOPBACK) as url, _posting(url, body[:5], framing) as connection:
        time.sleep(0.6)  # the rest of the body comes later
        connection.sendall(body[5:])
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, content = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and json.loads(content)["time_ms"] >= 600


def test_of_two_content_types_the_first_is_judged_as_the_body_is_read(served):
    # guards the 415 check reading the Content-Type the JSON parser reads (the first)
    body = b'{"text": "the dog"}'
    with httpx.Client(base_url=served) as client:
        for first, second, status in [("text/plain", "application/json", 415),
                                      ("application/json", "text/plain", 200)]:  # fmt: skip
            headers = [("content-type", first), ("content-type", second)]
            assert client.post("/v1/translate", content=body, headers=headers).status_code == status


def test_sizes_over_their_limits_get_413(engine):
    settings = replace(LOOPBACK, max_body_bytes=2000, max_sentences=3, max_sentence_tokens=12)
    json_type = {"content-type": "application/json"}
    with Background(engine, settings) as url, httpx.Client(base_url=url) as client:
        long = " ".join(["children"] * 30)
        too_many = {"texts": ["the dog"] * 4}
        padded = b'{"text": "the dog"' + b" " * 3000 + b"}"
        cases = {
            "a sentence over the token limit": client.post("/v1/translate", json={"text": long}),
            "and in /v1/attention": client.post("/v1/attention", json={"text": long}),
            "and its target": client.post(
                "/v1/attention", json={"text": "the dog", "target": long}
            ),
            "too many sentences": client.post("/v1/translate", json=too_many),
            # valid JSON, short sentences: only its size is wrong (whitespace is JSON too)
            "a declared body over the limit": client.post(
                "/v1/translate", content=padded, headers=json_type
            ),
            "a chunked body over the limit, each chunk under it": client.post(
                "/v1/translate",
                content=iter([padded[i : i + 500] for i in range(0, len(padded), 500)]),
                headers=json_type,
            ),
        }
        for case, answer in cases.items():
            assert answer.status_code == 413, case
            assert answer.json()["detail"], case
        assert "12" in cases["a sentence over the token limit"].json()["detail"]
        assert cases["a sentence over the token limit"].json()["detail"].startswith("the sentence")
        second = client.post("/v1/translate", json={"texts": ["the dog", long, "a cat"]})
        assert second.json()["detail"].startswith("sentence 2 of 3 has")  # counted as people do
        assert client.post("/v1/translate", json={"texts": ["the dog"] * 3}).status_code == 200


def test_the_sentence_limit_is_inclusive_and_a_learned_position_table_lowers_it(
    engine, monkeypatch
):
    counts = engine.facts.token_counts
    fits = " ".join(["the dog runs"] * 10)
    limit = counts([fits])[0]
    over = fits + " runs"
    assert counts([over])[0] > limit
    settings = replace(LOOPBACK, max_sentence_tokens=limit)
    with Background(engine, settings) as url, httpx.Client(base_url=url) as client:
        assert client.post("/v1/translate", json={"text": fits}).status_code == 200
        assert client.post("/v1/translate", json={"text": over}).status_code == 413
    # a model whose positions end at a table (Table 3 row E) reads no longer sentence than it
    monkeypatch.setattr(engine, "facts", replace(engine.facts, max_positions=limit - 1))
    with Background(engine, settings) as url, httpx.Client(base_url=url) as client:
        answer = client.post("/v1/translate", json={"text": fits})
    assert answer.status_code == 413 and f"at most {limit - 1}" in answer.json()["detail"]


def test_a_full_queue_answers_429_with_retry_after(engine, monkeypatch):
    settings = replace(LOOPBACK, max_queue_sentences=3, retry_after_s=2)
    gate = Gate(engine, monkeypatch)
    with Background(engine, settings) as url, httpx.Client(base_url=url, timeout=60) as client:
        with ThreadPoolExecutor(2) as pool:
            held = pool.submit(client.post, "/v1/translate", json={"text": "the dog"})
            assert gate.entered.wait(30)  # the worker holds it: the queue is empty again
            waiting = pool.submit(client.post, "/v1/translate", json={"texts": ["a", "b", "c"]})
            _until(lambda: client.get("/health").json()["queued_sentences"] == 3)
            gauges = client.get("/metrics").text  # each gauge its own: 3 sentences, 1 request
            refused = client.post("/v1/translate", json={"text": "green grass"})
            gate.opened.set()
            assert held.result().status_code == 200 and waiting.result().status_code == 200
        assert metric(gauges, "transduce_queue_sentences") == 3
        assert metric(gauges, "transduce_queue_requests") == 1
        assert refused.status_code == 429 and refused.headers["retry-after"] == "2"
        assert "queue is full" in refused.json()["detail"]
        assert "green grass" not in gate.decoded
        _good(client)


def test_a_request_the_queue_would_make_late_answers_429_with_when_the_queue_clears(
    engine, monkeypatch
):
    """At the decoder's measured speed (here 2 subwords x beam a second), the work waiting
    ahead would outlast a request's 30 s: it is refused at once, not answered 504 after 30 s,
    and told when the work ahead will have been decoded."""
    monkeypatch.setattr(Batcher, "speed", property(lambda self: 2.0))
    gate = Gate(engine, monkeypatch)
    with Background(engine, LOOPBACK) as url, httpx.Client(base_url=url, timeout=60) as client:
        with ThreadPoolExecutor(2) as pool:
            held = pool.submit(client.post, "/v1/translate", json={"text": "the dog"})
            assert gate.entered.wait(30)  # the worker holds it: the queue is empty again
            ahead = ["a dog runs on the green grass"] * 4  # 4 x (subwords + EOS) x the beam
            waiting = pool.submit(client.post, "/v1/translate", json={"texts": ahead})
            _until(lambda: client.get("/health").json()["queued_sentences"] == 4)
            refused = client.post("/v1/translate", json={"text": "green grass"})
            gate.opened.set()
            assert held.result().status_code == 200 and waiting.result().status_code == 200
        assert refused.status_code == 429 and "server is busy" in refused.json()["detail"]
        work = sum(engine.facts.token_counts(ahead)) * DECODE.beam_size  # the server's beam
        assert refused.headers["retry-after"] == str(math.ceil(work / 2.0))
        assert "green grass" not in gate.decoded
        _good(client)


def test_a_request_past_its_time_budget_gets_504_and_is_never_decoded(engine, monkeypatch):
    gate = Gate(engine, monkeypatch)
    settings = replace(LOOPBACK, request_timeout_s=1.0)
    with Background(engine, settings) as url, httpx.Client(base_url=url, timeout=60) as client:
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(client.post, "/v1/translate", json={"text": "the dog"})
            assert gate.entered.wait(30)
            late = client.post("/v1/translate", json={"text": "green grass"})
            assert client.get("/health").json()["queued_sentences"] == 0  # taken out at once
            gate.opened.set()
            held = held.result()  # its own budget ran out in the worker, which goes on
        assert held.status_code == 504 and "time budget" in held.json()["detail"]
        assert held.json()["detail"].endswith("goes on and its result is thrown away")
        assert late.status_code == 504
        assert late.json()["detail"].endswith("its work was dropped before decoding")
        assert gate.decoded == ["the dog"]  # "green grass" never reached the model
        text = client.get("/metrics").text
        assert metric(text, "transduce_dropped_total", reason="timeout") == 2
        _good(client)


def test_a_client_that_disconnects_has_its_work_dropped(engine, monkeypatch):
    gate = Gate(engine, monkeypatch)
    with Background(engine, LOOPBACK) as url, httpx.Client(base_url=url, timeout=60) as client:
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(client.post, "/v1/translate", json={"text": "the dog"})
            assert gate.entered.wait(30)
            _send_and_hang_up(url, b'{"text": "green grass"}')
            _until(lambda: metric(client.get("/metrics").text, "transduce_dropped_total",
                                  reason="disconnected") == 1)  # fmt: skip
            assert client.get("/health").json()["queued_sentences"] == 0
            gate.opened.set()
            assert held.result().status_code == 200
        assert gate.decoded == ["the dog"]
        _good(client)


def _send_and_hang_up(url: str, body: bytes) -> None:
    """POST `body` to /v1/translate, wait until it is queued, and close the connection."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as connection:
        head = (
            f"POST /v1/translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        connection.sendall(head.encode() + body)
        _until(lambda: httpx.get(url + "/health").json()["queued_sentences"] == 1)


def _until(condition, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


@pytest.mark.parametrize("stop", ["terminate", "kill"])
def test_the_serve_verb_listens_on_loopback_and_leaves_no_decoder_behind(tmp_path, stop):
    import subprocess
    import sys

    from .conftest import save_toy_model

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = save_toy_model(tmp_path)
    command = [sys.executable, "-m", "transduce", "-q", "serve", "--model", str(model)]
    server = subprocess.Popen([*command, "--port", str(port)], stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        _until(lambda: _answers(url + "/health"), seconds=60)
        # httpx's 5 s default is short for a first decoding on a busy host (the child loading)
        assert httpx.get(url + "/v1/models", timeout=60).json()["models"][0]["name"] == "toy.pt"
        answer = httpx.post(url + "/v1/translate", json={"text": "the dog"}, timeout=60)
        assert answer.status_code == 200
        decoders = _children(server.pid)
        assert decoders, "the model decodes in a process of its own by default"
    finally:
        getattr(server, stop)()  # SIGTERM: uvicorn's orderly stop; SIGKILL: none at all
        server.wait(timeout=30)
    assert server.returncode is not None
    _until(lambda: not any(map(_running, decoders)))  # gone with the server: no orphan


def _children(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    found = (task / "children" for task in tasks.iterdir()) if tasks.exists() else ()
    return [int(child) for path in found for child in path.read_text().split()]


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has exited


def _answers(address: str) -> bool:
    try:
        return httpx.get(address).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_body_of_exactly_the_limit_is_served_declared_or_chunked(engine):
    body = b'{"text": "the dog"' + b" " * 200 + b"}"
    settings = replace(LOOPBACK, max_body_bytes=len(body))
    over = body[:-1] + b" }"

    def chunked(data: bytes):
        return iter([data[i : i + 50] for i in range(0, len(data), 50)])

    with Background(engine, settings) as url, httpx.Client(base_url=url, timeout=60) as client:
        assert client.post("/v1/translate", content=body, headers=JSON).status_code == 200
        assert client.post("/v1/translate", content=chunked(body), headers=JSON).status_code == 200
        assert client.post("/v1/translate", content=over, headers=JSON).status_code == 413
        assert client.post("/v1/translate", content=chunked(over), headers=JSON).status_code == 413


def test_a_beam_and_a_max_len_b_of_exactly_the_limit_are_served(engine):
    settings = replace(LOOPBACK, max_beam=3, max_len_b=4)
    with Background(engine, settings) as url, httpx.Client(base_url=url, timeout=60) as client:
        at_limit = {"text": "the dog", "beam_size": 3, "max_len_b": 4}
        assert client.post("/v1/translate", json=at_limit).status_code == 200
        over_beam = {"text": "the dog", "beam_size": 4}
        assert client.post("/v1/translate", json=over_beam).status_code == 422
        over_len = {"text": "the dog", "max_len_b": 5}
        assert client.post("/v1/translate", json=over_len).status_code == 422
