"""The app's wiring and its running (serve/app.py, serve/server.py): the page and the schema name
the model and the settings, `serve` hands its settings to uvicorn and closes a decoding process
however it ends, and `Background` keeps idle connections open, reports a failed start at once and
leaves no thread behind."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from dataclasses import replace

import pytest

httpx = pytest.importorskip("httpx", reason="the dev extra: pip install -e '.[dev]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

import transduce  # noqa: E402
from transduce.serve import server as server_module  # noqa: E402
from transduce.serve.batcher import Batcher  # noqa: E402
from transduce.serve.server import Background, serve  # noqa: E402
from transduce.serve.settings import ServeSettings  # noqa: E402
from transduce.serve.worker import DecoderProcess  # noqa: E402

from .serving import DECODE, toy_engine  # noqa: E402

LOOPBACK = ServeSettings(port=0)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return toy_engine(tmp_path_factory.mktemp("serve-app"))


def test_the_page_names_the_model_and_offers_the_settings_beams(engine):
    with Background(engine, replace(LOOPBACK, max_beam=6)) as url:
        page = httpx.get(url + "/").text
        info = httpx.get(url + "/openapi.json").json()["info"]
    assert "<title>transduce: toy.pt</title>" in page
    config = re.search(r'<script id="config" type="application/json">(.*?)</script>', page)
    # the model's own beam chosen, beams up to the server's max_beam offered, attention drawn
    assert json.loads(config[1]) == {"beam": DECODE.beam_size, "maxBeam": 6, "noAttention": None,
                                     "termsBeam": 6,  # the run's 8, within max_beam
                                     "noRepeat": 0, "repeatSize": 4}  # fmt: skip
    assert info["version"] == transduce.__version__


class _Decoder(DecoderProcess):
    """A decoding process that is never started: its facts are the toy's, its closes counted."""

    def __init__(self, facts) -> None:
        self.facts, self.closes = facts, 0

    def close(self) -> None:
        self.closes += 1


def test_serve_hands_uvicorn_its_settings_and_closes_the_decoder_however_it_ends(
    engine, monkeypatch
):
    ran = []

    def interrupted(app, **options):
        ran.append(options)
        raise KeyboardInterrupt  # Ctrl-C: uvicorn's way out

    monkeypatch.setattr(server_module.uvicorn, "run", interrupted)
    decoder = _Decoder(engine.facts)
    with pytest.raises(KeyboardInterrupt):
        serve(decoder, ServeSettings(host="127.0.0.2", port=8123), quiet=True)
    assert decoder.closes == 1  # no decoding process outlives the server
    assert ran[0]["host"] == "127.0.0.2" and ran[0]["port"] == 8123
    assert (ran[0]["log_level"], ran[0]["access_log"]) == ("warning", False)  # quiet: no lines
    monkeypatch.setattr(server_module.uvicorn, "run", lambda app, **options: ran.append(options))
    serve(decoder, ServeSettings())
    assert decoder.closes == 2
    assert (ran[1]["log_level"], ran[1]["access_log"]) == ("info", True)  # a line per request


def test_an_idle_connection_is_still_open_for_the_next_request_a_second_later(engine):
    """Keep-alive: a client that reuses its connection after a pause meets no closed socket."""
    with Background(engine, LOOPBACK) as url:
        host, port = url.removeprefix("http://").split(":")
        ask = f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        with socket.create_connection((host, int(port)), timeout=10) as connection:
            connection.sendall(ask)
            assert connection.recv(65536).startswith(b"HTTP/1.1 200")
            time.sleep(1)
            connection.sendall(ask)
            assert connection.recv(65536).startswith(b"HTTP/1.1 200")


# uvicorn ends its thread with SystemExit(3) when the app's startup fails
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_server_that_fails_to_start_says_so_at_once_and_frees_its_port(engine, monkeypatch):
    def broken(self) -> None:
        raise RuntimeError("no worker")

    monkeypatch.setattr(Batcher, "start", broken)  # the app's startup (its lifespan) fails
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    asked = time.monotonic()
    with (
        pytest.raises(RuntimeError, match="the server did not start"),
        Background(engine, replace(LOOPBACK, port=port)),
    ):
        pass
    assert time.monotonic() - asked < 10  # not after the 30 s a slow start is given
    with socket.socket() as again:
        again.bind(("127.0.0.1", port))  # the failed server's socket is closed, not leaked


def test_leaving_the_block_stops_the_server_and_its_worker(engine):
    before = set(threading.enumerate())
    asked = time.monotonic()
    with Background(engine, LOOPBACK) as url:
        assert httpx.get(url + "/health").status_code == 200
    assert time.monotonic() - asked < 10
    assert set(threading.enumerate()) <= before  # neither uvicorn's thread nor the worker left
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health")


def test_a_translator_is_served_as_it_stands_and_settings_of_another_kind_are_named(engine):
    """`create_app(transduce.load(run))` failed on a missing `facts`; a dict of settings failed
    as late, on a missing attribute."""
    from fastapi.testclient import TestClient

    from transduce.serve.app import create_app

    with TestClient(create_app(engine.translator)) as client:
        answer = client.post("/v1/translate", json={"text": "the dog"})
        assert answer.status_code == 200 and answer.json()["model"] == "model"
    with pytest.raises(TypeError, match="settings must be a ServeSettings, not dict"):
        create_app(engine, {"max_beam": 4})


def test_the_pages_model_name_is_escaped_and_its_beam_kept_within_the_servers_limit():
    """A model name is text, not markup; a model whose own beam passes `max_beam` has the page
    offer `max_beam`, not a beam every translation would be refused (422) for."""
    from transduce.serve.page import render_index

    reason = "models </script><b>differ"  # why attention is not drawn: text inside the script
    page = render_index("<b>&", beam=8, max_beam=4, no_attention=reason)
    assert "<title>transduce: &lt;b&gt;&amp;</title>" in page and "<b>&" not in page
    config = re.search(r'<script id="config" type="application/json">(.*?)</script>', page)
    assert json.loads(config[1]) == {"beam": 4, "maxBeam": 4, "noAttention": reason, "termsBeam": 4,
                                     "noRepeat": 0, "repeatSize": 4}  # fmt: skip
    page = render_index("m", beam=4, max_beam=4, no_repeat_ngram=3)  # the run's rule: checked
    config = json.loads(re.search(r'"application/json">(.*?)</script>', page)[1])
    assert config["noRepeat"] == 3 and config["repeatSize"] == 3
    page = render_index("m", beam=4, max_beam=4, no_repeat_ngram=None)  # a parser: not offered
    assert json.loads(re.search(r'"application/json">(.*?)</script>', page)[1])["noRepeat"] is None
