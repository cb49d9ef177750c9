"""Batching across requests: one decoding worker (a thread) takes what has queued up, to a token
budget or what came within a few milliseconds of the first, and runs each group of jobs that
share settings as one call, so concurrent requests are decoded together.

A job's result never depends on what it was batched with: a group is one `Translator` call, which
sorts its sentences by length and decodes them in padded batches, and batched search decodes each
sentence as it would alone (tests/test_search.py). Work whose request has given up (its time budget
spent, its client gone) is taken out of the queue and never decoded; a decoding call whose every
request has given up is stopped where the decoder can be (`abandon`: a decoding process is killed
and replaced), so that one costly request cannot hold the decoder long after its answer.

A request is refused at once (429) when it could not be answered in time: when the work waiting
ahead of it, even at the fastest speed the decoder has lately been measured to decode, would
take longer than the request's time budget. It would otherwise wait, be answered 504, and have
taken a place in the queue for nothing. Work is counted as source subwords times the beam.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from .engine import BadRequest
from .metrics import Metrics
from .settings import ServeSettings

logger = logging.getLogger(__name__)


class QueueFull(Exception):
    """The queue holds `max_queue_sentences` already, or more work than the request's time
    budget allows: the request is answered 429, to try again after `retry_after` seconds (None:
    the server's setting)."""

    def __init__(self, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# The decoder's speed is the fastest of its last calls (work over time): under load those are
# full batches, decoded fastest, which is what a queue waits for. The fastest, not the mean, so
# that slow small calls (a quiet server's, or a first call's warm-up) cannot make a burst of
# requests look later than it will be: a refusal on a wrong guess would cost more than a 504.
SPEED_WINDOW = 16


@dataclass(eq=False)
class Job:
    """One request's work. Jobs with equal `key` are run together: `run` takes their payloads
    and returns one result per payload, in order."""

    payload: object
    key: Hashable
    run: Callable[[list[object]], list[object]]
    sentences: int
    tokens: int  # the subwords it adds to a batch
    deadline: float  # time.monotonic() past which nobody waits for its result
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)
    beam: int = 1  # hypotheses kept per sentence: its work is tokens x beam
    dropped: str | None = None  # why its request gave up, once it has
    decoded: bool = False  # its call has ended (its result, or error, on the way)

    @property
    def work(self) -> int:
        return self.tokens * self.beam


class Batcher:
    """The queue and its one decoding worker."""

    def __init__(
        self,
        settings: ServeSettings,
        metrics: Metrics,
        abandon: Callable[[], None] | None = None,
    ) -> None:
        """`abandon`: stops the decoding call in progress (from another thread), which then
        raises; None where the decoder cannot be stopped."""
        self.settings, self.metrics, self._abandon = settings, metrics, abandon
        self._pending: deque[Job] = deque()
        self._running: list[Job] = []  # the group being decoded
        self._queued_sentences = self._queued_work = 0
        self._calls: deque[tuple[int, float]] = deque(maxlen=SPEED_WINDOW)  # (work, seconds)
        self._changed = threading.Condition()
        self._closing = False
        self._worker = threading.Thread(target=self._work, name="transduce-decoder", daemon=True)

    @property
    def queued(self) -> tuple[int, int]:
        """(sentences, requests) waiting for the worker."""
        with self._changed:
            return self._queued_sentences, len(self._pending)

    def start(self) -> None:
        self._worker.start()

    def stop(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._worker.join(timeout=60)

    def submit(self, job: Job) -> None:
        """Queue `job`, or raise QueueFull when its sentences would not fit, or when the work
        ahead of it would outlast its time budget."""
        with self._changed:
            if self._queued_sentences + job.sentences > self.settings.max_queue_sentences:
                raise QueueFull(
                    f"the queue is full ({self._queued_sentences} sentences waiting, "
                    f"at most {self.settings.max_queue_sentences})"
                )
            self._refuse_if_late(job)
            self._pending.append(job)
            self._queued_sentences += job.sentences
            self._queued_work += job.work
            self._changed.notify_all()

    def _refuse_if_late(self, job: Job) -> None:
        """QueueFull when the waiting work and the job's own, at the decoder's measured speed,
        would take longer than the job's time left. Never with an empty queue: a request alone
        is tried, however long the guess says it takes."""
        speed = self.speed
        if speed is None or self._queued_work == 0:
            return
        expected = (self._queued_work + job.work) / speed
        left = job.deadline - time.monotonic()
        if expected > left:
            ahead = self._queued_work / speed
            raise QueueFull(
                f"the server is busy: the work waiting would take about {ahead:.1f} s at the "
                f"decoder's speed, and this request's would end past its time budget "
                f"({left:.1f} s left)",
                retry_after=max(1, math.ceil(ahead)),
            )

    @property
    def speed(self) -> float | None:
        """The work (source subwords x beam) a second of the fastest of the decoder's last
        calls; None before it has decoded anything."""
        speeds = [work / seconds for work, seconds in self._calls if seconds > 0]
        return max(speeds, default=None)

    def withdraw(self, job: Job, reason: str) -> str:
        """The request has given up. Returns what became of its work: "dropped" (it still
        waited, or was taken but not yet begun: never decoded), "stopped" (its time budget ran
        out while it was decoded for no one else: the call is abandoned) or "discarded" (decoded
        on, for other requests, by a decoder that cannot be stopped, for a client that left, or
        done already; its result thrown away)."""
        with self._changed:
            job.dropped = reason
            if job in self._pending:
                self._pending.remove(job)
                self._queued_sentences -= job.sentences
                self._queued_work -= job.work
                self.metrics.count_dropped(reason)
                return "dropped"
            if job not in self._running and not job.decoded:
                return "dropped"  # `_run` skips it and counts it
            self.metrics.count_dropped(reason)
            # Only a spent budget stops the call: a client's departure costs nothing to cause,
            # and a restart (a model loaded again) may cost more than the decoding left.
            everyone_gone = all(j.dropped for j in self._running)
            if job.decoded or reason != "timeout" or self._abandon is None or not everyone_gone:
                return "discarded"
            self._abandon()  # under the lock: `_run` cannot begin the next group's call meanwhile
            return "stopped"

    def _work(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            jobs = self._live(taken)
            if not jobs:
                continue
            self.metrics.observe_batch(sum(job.sentences for job in jobs))
            for group in _groups(jobs):
                self._run(group)

    def _take(self) -> list[Job] | None:
        """Wait for work, then for more until the token budget is met or the first job has
        waited `batch_wait_ms`; take jobs in arrival order up to the budget (at least one)."""
        budget = self.settings.batch_tokens
        with self._changed:
            while not self._pending and not self._closing:
                self._changed.wait()
            if self._closing:
                return None
            flush_at = self._pending[0].arrived + self.settings.batch_wait_ms / 1000
            while sum(job.tokens for job in self._pending) < budget and not self._closing:
                left = flush_at - time.monotonic()
                if left <= 0 or not self._pending:
                    break
                self._changed.wait(left)
            taken: list[Job] = []
            tokens = 0
            while self._pending and (not taken or tokens + self._pending[0].tokens <= budget):
                job = self._pending.popleft()
                self._queued_sentences -= job.sentences
                self._queued_work -= job.work
                tokens += job.tokens
                taken.append(job)
            return taken

    def _live(self, jobs: list[Job]) -> list[Job]:
        """The jobs someone still waits for; the others are dropped, never decoded."""
        now, live = time.monotonic(), []
        for job in jobs:
            if job.dropped is None and now < job.deadline:
                live.append(job)
            else:
                self.metrics.count_dropped(job.dropped or "timeout")
        return live

    def _run(self, group: list[Job]) -> None:
        with self._changed:  # one hold: a request giving up now is either skipped or running
            group = self._live(group)  # a request may give up while another group runs
            self._running = group
        if not group:
            return
        try:
            began = time.monotonic()
            results = list(group[0].run([job.payload for job in group]))
            if len(results) != len(group):
                raise RuntimeError(f"{len(results)} results for {len(group)} jobs")
            with self._changed:
                self._calls.append((sum(job.work for job in group), time.monotonic() - began))
        except Exception as error:  # the worker lives on; each request is told
            if all(job.dropped for job in group):  # abandoned: nobody waits to be told
                logger.info("decoding stopped: every request waiting for it had given up")
            elif isinstance(error, BadRequest):  # the request's mistake, answered 422
                logger.info("refused: %s", error)
            else:
                logger.exception("decoding failed")
            for job in group:
                _settle(job, None, error)
            return
        finally:
            with self._changed:
                for job in group:
                    job.decoded = True
                self._running = []
        for job, result in zip(group, results, strict=True):
            _settle(job, result, None)


def _groups(jobs: list[Job]) -> list[list[Job]]:
    """The jobs by key, each group in arrival order."""
    groups: dict[Hashable, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.key, []).append(job)
    return list(groups.values())


def _settle(job: Job, result: object, error: BaseException | None) -> None:
    """Hand the result to the request's event loop (from the worker's thread)."""

    def deliver() -> None:
        if job.future.done():  # the request gave up meanwhile
            return
        if error is None:
            job.future.set_result(result)
        else:
            job.future.set_exception(error)

    with contextlib.suppress(RuntimeError):  # the loop has closed: the server is stopping
        job.future.get_loop().call_soon_threadsafe(deliver)
