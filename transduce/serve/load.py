"""A bounded load on a running server: `clients` concurrent clients share a fixed list of
requests, each client sending its next one when its answer comes, until none is left; every
answer and latency is kept. Used by the load test and benchmarks/serve_load.py (needs httpx)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass

from .metrics import percentile


@dataclass
class LoadResult:
    statuses: Counter  # status -> answers; "lost: ReadTimeout" etc. for requests not answered
    answers: list[dict | None]  # per request, its JSON when it was answered 200
    latencies: list[float]  # seconds, per answered request
    seconds: float  # from the first request sent to the last answer

    @property
    def throughput(self) -> float:
        """Requests answered 200 per second."""
        return self.statuses[200] / self.seconds

    def latency(self, q: float) -> float:
        return percentile(self.latencies, q)


def run_load(
    url: str, path: str, bodies: list[dict], clients: int, timeout: float = 120
) -> LoadResult:
    """POST each of `bodies` to `url + path`, `clients` at a time; returns when all are answered
    or have failed (each is given `timeout` seconds)."""
    return asyncio.run(_load(url + path, bodies, clients, timeout))


async def _load(address: str, bodies: list[dict], clients: int, timeout: float) -> LoadResult:
    import httpx

    todo = iter(range(len(bodies)))
    answers: list[dict | None] = [None] * len(bodies)
    statuses: Counter = Counter()
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(session: httpx.AsyncClient) -> None:
        for i in todo:  # one shared iterator: each request is sent once
            sent = time.perf_counter()
            try:
                answer = await session.post(address, json=bodies[i])
            except httpx.HTTPError as error:  # no answer: counted by kind
                statuses[f"lost: {type(error).__name__}"] += 1
                continue
            latencies.append(time.perf_counter() - sent)
            statuses[answer.status_code] += 1
            if answer.status_code == 200:
                answers[i] = answer.json()

    async with httpx.AsyncClient(limits=limits, timeout=timeout) as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        seconds = time.perf_counter() - started
    return LoadResult(statuses, answers, latencies, seconds)
