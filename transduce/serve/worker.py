"""The decoding worker's model in a process of its own, so that decoding and HTTP do not share
one interpreter lock.

Beam search over a small model is mostly Python between short tensor operations, so a decoding
thread holds the interpreter lock most of the time and the event loop that reads requests waits
for it: requests reach the queue late and batches stay small (benchmarks/SERVE.md). Here the
`Engine` lives in a child process (spawned: no forked torch state); the batcher's thread hands it
each group of jobs over a pipe and waits, without the lock, for the results. Only `ModelFacts`
(name, vocabulary, decoding settings) is kept in the server's process, to check requests.

A child that dies (killed, out of memory) fails the requests it was decoding with
`DecoderRestarted` (503) and is replaced by a fresh one; the server keeps serving. The same path
stops work nobody waits for any more: `abandon` kills the child, and the call restarts one.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import signal
import threading
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path

from ..decoding.workers import picklable
from ..models.saved import given_paths
from .engine import AttentionWork, Engine, ModelFacts, ScoreWork, TranslateWork

logger = logging.getLogger(__name__)


class DecoderRestarted(RuntimeError):
    """The decoding process died while it held this request's work (answered 503)."""


class DecoderProcess:
    """`Engine`'s `translate`, `score` and `attention`, run by a child process that loads the model.

    One call at a time (the batcher has one worker thread; a lock keeps it so for any caller).
    `child_main` is what the child runs, given (pipe, models, device, int8, threads, channel,
    precision): one
    the child can import (tests pass one that dies). Several models: their ensemble."""

    def __init__(
        self,
        model: Path | str | Sequence[Path | str],
        device: str | None = None,
        int8: bool = False,
        threads: int | None = None,
        child_main: Callable[..., None] | None = None,
        channel: Path | str | None = None,
        precision: str | None = None,
    ) -> None:
        paths = [str(path) for path in given_paths(model)]  # expanded by Engine.load
        reverse = None if channel is None else str(channel)
        self._spec = (paths, device, int8, threads, reverse, precision)
        self._child_main = child_main or _decode_forever
        self._lock = threading.Lock()
        self._process: multiprocessing.process.BaseProcess | None = None
        self._abandoned = False  # the child was killed on purpose: `abandon`
        self._start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def translate(self, works: list[TranslateWork]) -> list[list[list[dict]]]:
        return self._call("translate", works)

    def attention(self, works: list[AttentionWork]) -> list[dict]:
        return self._call("attention", works)

    def score(self, works: list[ScoreWork]) -> list[list[dict]]:
        return self._call("score", works)

    def abandon(self) -> None:
        """Stop the call in progress, called from another thread than the one waiting on it
        (the batcher's, when every request of the call has given up): the child is killed, and
        the call starts another and raises DecoderRestarted, which nobody reads."""
        process = self._process
        if process is not None and process.is_alive():
            self._abandoned = True
            process.kill()

    def close(self) -> None:
        """Ask the child to finish, and make sure it has."""
        with self._lock:
            self._stop()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._pipe, theirs = context.Pipe()
        self._process = context.Process(
            target=self._child_main, args=(theirs, *self._spec), name="transduce-decoder",
            daemon=True,
        )  # fmt: skip
        self._process.start()
        self._abandoned = False
        theirs.close()  # the child's end lives in the child only: its death is our EOFError
        outcome, value = _receive(self._pipe, self._process)
        if outcome == "error":
            self._stop()
            raise value
        self.facts: ModelFacts = value
        logger.info("decoding process %d serves %s", self._process.pid, self.facts.name)

    def _call(self, method: str, works: list) -> list:
        with self._lock:
            # Died while idle, or killed by `abandon` just after its answer (still alive for a
            # moment after the signal): started afresh before it is given anyone's work.
            if self._abandoned or not self._process.is_alive():
                self._log_death("had died", self._process.exitcode)
                self._stop()
                self._start()
            try:
                self._pipe.send((method, works))
                outcome, value = _receive(self._pipe, self._process)
            except (EOFError, OSError) as died:
                code = self._process.exitcode if self._process else None
                self._log_death("died", code)
                self._stop()
                self._start()
                raise DecoderRestarted(
                    f"the decoding process died (exit code {code}) with this request's work; "
                    "a new one has started: send it again"
                ) from died
        if outcome == "error":
            raise value
        return value

    def _log_death(self, how: str, code: int | None) -> None:
        if self._abandoned:  # killed on purpose: `abandon`
            logger.info("the decoding process was stopped with work nobody waits for: "
                        "starting another")  # fmt: skip
        else:
            logger.error("the decoding process %s (exit code %s): starting another", how, code)

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):  # it has gone already
            self._pipe.send(None)
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
            process.join()
        self._pipe.close()


def _receive(pipe: Connection, process) -> tuple[str, object]:
    """The child's next message; EOFError if it dies before sending one."""
    while not pipe.poll(0.5):
        if not process.is_alive():
            raise EOFError("the decoding process has exited")
    return pipe.recv()


def _decode_forever(
    pipe: Connection,
    models: list[str],
    device: str | None,
    int8: bool,
    threads: int | None,
    channel: str | None = None,
    precision: str | None = None,
) -> None:
    """The child: load the model (several: their ensemble), send its facts, then answer
    (method, works) until told to stop (None) or the server has gone (the pipe closed)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle
    import torch

    if threads:
        torch.set_num_threads(threads)
    try:
        engine = Engine.load(models, device, int8, channel, precision)
    except Exception as error:
        pipe.send(("error", picklable(error)))
        return
    pipe.send(("ok", engine.facts))
    while True:
        try:
            message = pipe.recv()
        except EOFError:
            return
        if message is None:
            return
        method, works = message
        try:
            pipe.send(("ok", getattr(engine, method)(works)))
        except Exception as error:  # e.g. BadRequest: the request is told, the child lives on
            pipe.send(("error", picklable(error)))
