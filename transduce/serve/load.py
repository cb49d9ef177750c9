"""A bounded load on a running server: `clients` concurrent clients share a fixed list of
requests, each client sending its next one when its answer comes, until none is left; every
answer and latency is kept. Used by the load test and benchmarks/serve_load.py (needs aiohttp,
in the dev extra)."""

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
    # aiohttp, not httpx: at 200 concurrent connections httpx's async pool answered 192 bare
    # GET /health a second where aiohttp answered 7,656 from the same server (benchmarks/SERVE.md),
    # so with httpx the load test measured its own client.
    import aiohttp

    todo = iter(range(len(bodies)))
    answers: list[dict | None] = [None] * len(bodies)
    statuses: Counter = Counter()
    latencies: list[float] = []

    async def client(session: aiohttp.ClientSession) -> None:
        for i in todo:  # one shared iterator: each request is sent once
            sent = time.perf_counter()
            try:
                async with session.post(address, json=bodies[i]) as answer:
                    body = await answer.json() if answer.status == 200 else await answer.read()
            except (TimeoutError, aiohttp.ClientError) as error:  # no answer: by kind
                statuses[f"lost: {type(error).__name__}"] += 1
                continue
            latencies.append(time.perf_counter() - sent)
            statuses[answer.status] += 1
            if answer.status == 200:
                answers[i] = body

    connector = aiohttp.TCPConnector(limit=clients)
    budget = aiohttp.ClientTimeout(total=timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=budget) as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        seconds = time.perf_counter() - started
    return LoadResult(statuses, answers, latencies, seconds)
