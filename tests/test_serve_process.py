"""The decoding worker in a process of its own (`transduce serve`'s default): concurrent clients
get what offline translation gives, errors of the model's side cross back as their statuses, and a
decoding process that dies is replaced while the server keeps serving."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

httpx = pytest.importorskip("httpx", reason="the dev extra: pip install -e '.[dev]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

from transduce.decoding.workers import picklable  # noqa: E402
from transduce.serve.engine import AttentionWork, BadRequest, TranslateWork  # noqa: E402
from transduce.serve.server import Background  # noqa: E402
from transduce.serve.settings import ServeSettings  # noqa: E402
from transduce.serve.worker import DecoderProcess, _decode_forever  # noqa: E402

from .conftest import save_toy_model  # noqa: E402
from .serving import DECODE, metric, sentences  # noqa: E402

LOOPBACK = ServeSettings(port=0, batch_wait_ms=50)
DIES_ONCE = "TRANSDUCE_TEST_DIES_ONCE"  # a file: the first child to be given work makes it, dies


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return save_toy_model(tmp_path_factory.mktemp("serve-process"), DECODE)


@pytest.fixture(scope="module")
def decoder(model):
    process = DecoderProcess(model, threads=1)
    yield process
    process.close()


def test_concurrent_clients_get_what_offline_translate_gives(model, decoder):
    from transduce.decoding.translate import Translator

    offline = Translator.load(model)
    requests = [sentences(1 + i % 4, seed=i) for i in range(16)]
    with Background(decoder, LOOPBACK) as url, httpx.Client(base_url=url, timeout=60) as client:

        def ask(lines):
            return client.post("/v1/translate", json={"texts": lines, "n_best": 2}).json()

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, requests))
        assert client.get("/v1/models").json()["models"][0]["name"] == "toy.pt"
    for lines, answer in zip(requests, answers, strict=True):
        expected = offline.translate(lines, replace(DECODE, n_best=2))
        got = [[(h["text"], h["score"]) for h in t["n_best"]] for t in answer["translations"]]
        assert [[text for text, _ in hyps] for hyps in got] == [
            [text for text, _ in hyps] for hyps in expected
        ]
        for hyps, want in zip(got, expected, strict=True):
            assert [s for _, s in hyps] == pytest.approx([s for _, s in want], abs=1e-4)


def test_an_error_in_the_decoding_process_crosses_back_as_itself(decoder):
    """The route refuses a layer out of range before decoding (tests/test_serve.py); a caller
    of the process itself gets the child's BadRequest across the pipe, and the child serves on."""
    with pytest.raises(BadRequest, match="layer 7 out of range"):
        decoder.attention([AttentionWork("the dog", None, DECODE, True, 7)])
    assert decoder.attention([AttentionWork("the dog", None, DECODE, True, None)])
    with Background(decoder, LOOPBACK) as url, httpx.Client(base_url=url, timeout=60) as client:
        answer = client.post("/v1/attention", json={"text": "the dog", "layer": 7})
        assert answer.status_code == 422 and "out of range" in answer.json()["detail"]
        assert client.post("/v1/attention", json={"text": "the dog"}).status_code == 200


def _on_the_first_work(pipe, spec, marker_variable: str, instead) -> None:
    """`_decode_forever` in a child whose pipe, the first time any child is given work (the file
    named by the environment's `marker_variable` records it), calls `instead` before answering."""
    marker = Path(os.environ[marker_variable])

    class FirstWork:
        def send(self, message) -> None:
            pipe.send(message)

        def recv(self):
            message = pipe.recv()
            if message is not None and not marker.exists():
                marker.touch()
                instead()
            return message

    _decode_forever(FirstWork(), *spec)


def dies_on_its_first_work(pipe, *spec) -> None:
    """The child of `DecoderProcess` in the next tests: it loads the model and sends its facts,
    then, if it is the first child to be given work, dies holding it."""
    _on_the_first_work(pipe, spec, DIES_ONCE, lambda: os._exit(9))


def test_a_decoding_process_that_dies_with_work_is_replaced_and_the_server_serves_on(
    model, tmp_path, monkeypatch
):
    monkeypatch.setenv(DIES_ONCE, str(tmp_path / "died"))  # the spawned children inherit it
    decoder = DecoderProcess(model, threads=1, child_main=dies_on_its_first_work)
    first = decoder.pid
    try:
        with Background(decoder, LOOPBACK) as url, httpx.Client(base_url=url, timeout=60) as c:
            lost = c.post("/v1/translate", json={"text": "the dog runs"})
            assert lost.status_code == 503, lost.text
            assert "died" in lost.json()["detail"] and lost.headers["retry-after"] == "1"
            assert decoder.pid != first
            again = c.post("/v1/translate", json={"text": "the dog runs"})
            assert again.status_code == 200 and again.json()["translations"][0]["text"]
            assert c.get("/health").json()["status"] == "ok"
    finally:
        decoder.close()


HANGS_ONCE = "TRANSDUCE_TEST_HANGS_ONCE"  # a file: the first child given work makes it, then hangs


def hangs_on_its_first_work(pipe, *spec) -> None:
    """A child that, if it is the first to be given work, does not answer it for 120 s (were it
    not stopped, a failing test waits this long): one request too costly for any time budget."""
    _on_the_first_work(pipe, spec, HANGS_ONCE, lambda: time.sleep(120))


def test_decoding_that_every_request_has_given_up_on_is_stopped_and_the_server_serves_on(
    model, tmp_path, monkeypatch
):
    """A call whose requests have all timed out does not hold the decoder: its 504 says the
    decoding was stopped, the child is replaced, it counts as dropped, and the next request is
    answered at once, not after the abandoned call."""
    monkeypatch.setenv(HANGS_ONCE, str(tmp_path / "hung"))
    decoder = DecoderProcess(model, threads=1, child_main=hangs_on_its_first_work)
    first, settings = decoder.pid, replace(LOOPBACK, request_timeout_s=2.0)
    try:
        with Background(decoder, settings) as url, httpx.Client(base_url=url, timeout=60) as c:
            try:
                late = c.post("/v1/translate", json={"text": "the dog runs"})
                assert late.status_code == 504, late.text
                assert late.json()["detail"].endswith("its decoding was stopped")
                asked, work = time.monotonic(), TranslateWork(["the dog runs"], DECODE, False)
                assert decoder.translate([work])  # waits for the new child, not the hung one
                assert time.monotonic() - asked < 60 and decoder.pid not in (None, first)
                again = c.post("/v1/translate", json={"text": "the dog runs"})
                assert again.status_code == 200 and again.json()["translations"][0]["text"]
                dropped = metric(
                    c.get("/metrics").text, "transduce_dropped_total", reason="timeout"
                )
                assert dropped == 1
            finally:  # a failed test leaves no hung child for the server's shutdown to wait on
                with contextlib.suppress(ProcessLookupError):
                    os.kill(first, signal.SIGKILL)
    finally:
        decoder.close()


def test_a_child_stopped_just_after_its_answer_is_replaced_before_the_next_work(model):
    """`abandon` can land a moment after the child answered: the child is still alive then, but
    dying, and the next live request's work must go to a fresh one, not fail with a 503."""
    decoder = DecoderProcess(model, threads=1)
    try:
        first = decoder.pid
        decoder.abandon()
        work = TranslateWork(["the dog runs"], DECODE, alignments=False)
        assert decoder.translate([work])  # no DecoderRestarted
        assert decoder.pid not in (None, first)
    finally:
        decoder.close()


def test_a_decoding_process_that_died_idle_is_replaced_before_the_next_work(model):
    decoder = DecoderProcess(model, threads=1)
    try:
        first = decoder.pid
        os.kill(first, 9)
        with Background(decoder, LOOPBACK) as url, httpx.Client(base_url=url, timeout=60) as c:
            answer = c.post("/v1/translate", json={"text": "the dog runs"})
            assert answer.status_code == 200, answer.text  # nobody's work was lost: no 503
        assert decoder.pid not in (None, first)
    finally:
        decoder.close()


def test_the_decoding_process_ignores_ctrl_c_and_leaves_by_itself_when_closed(model):
    """Ctrl-C reaches the terminal's whole process group, and shutting down is the server's to
    do: the child decodes on. `close` asks it to leave, and it exits by itself (code 0, not
    killed), at once."""
    decoder = DecoderProcess(model, threads=1)
    try:
        first = decoder.pid
        os.kill(first, signal.SIGINT)
        time.sleep(1)  # time to die, were it to
        work = TranslateWork(["the dog runs"], DECODE, alignments=False)
        assert decoder.translate([work]) and decoder.pid == first
    finally:
        process, asked = decoder._process, time.monotonic()
        decoder.close()
    assert process.exitcode == 0 and time.monotonic() - asked < 5


def test_an_error_that_cannot_cross_the_pipe_crosses_as_one_that_names_it():
    class Local(Exception):  # pickle finds no class by this name
        pass

    error = picklable(Local("beam too wide"))
    assert type(error) is RuntimeError and str(error) == "Local: beam too wide"
    plain = ValueError("beam too wide")
    assert picklable(plain) is plain


def test_a_model_that_cannot_be_loaded_is_reported_by_the_server_process(tmp_path):
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a checkpoint")
    from transduce.training.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=r"broken\.pt: not a transduce checkpoint"):
        DecoderProcess(broken)  # the child's error, as `serve` prints it before listening


@pytest.mark.parametrize("threads", [None, 3])
def test_the_decoding_process_sets_torchs_threads_as_asked_before_it_loads(monkeypatch, threads):
    """`--threads N` reaches the child: it sets torch's thread count (only when given) before it
    loads the model, then sends the model's facts. Run in this process, with a stand-in model."""
    import torch

    import transduce.serve.worker as worker

    order: list = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: order.append(("threads", n)))
    engine = SimpleNamespace(facts="the facts")
    monkeypatch.setattr(
        worker.Engine, "load", staticmethod(lambda *given: order.append(("load", given)) or engine)
    )
    ours, theirs = multiprocessing.Pipe()
    ours.send(None)  # stop as soon as it has loaded
    before = signal.getsignal(signal.SIGINT)
    try:
        worker._decode_forever(theirs, ["m.pt"], "cpu", False, threads, None, "fp32")
    finally:
        signal.signal(signal.SIGINT, before)  # the child ignores Ctrl-C; this process must not
    assert ours.recv() == ("ok", "the facts")
    load = ("load", (["m.pt"], "cpu", False, None, "fp32"))  # no channel model; the precision
    assert order == ([("threads", 3), load] if threads else [load])
