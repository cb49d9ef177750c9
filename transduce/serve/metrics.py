"""What `GET /metrics` reports, in Prometheus's text format (version 0.0.4): requests by route and
status, the queue's depth, the worker's batch sizes, work dropped, and latency percentiles."""

from __future__ import annotations

import math
import threading
from collections import Counter, deque

# The routes counted by name; any other path is counted as "other", so that a client probing
# paths cannot grow the label set without bound.
ROUTES = (
    "/",
    "/health",
    "/metrics",
    "/v1/models",
    "/v1/translate",
    "/v1/score",
    "/v1/attention",
    "/openapi.json",
    "/docs",
)
QUANTILES = (0.5, 0.95, 0.99)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
WINDOW = 10_000  # latencies kept per route for the percentiles: the most recent requests


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile of `values` (0 < q <= 1); NaN when there are none."""
    if not values:
        return float("nan")
    ranked = sorted(values)
    rank = math.ceil(q * len(ranked) - 1e-9)  # the tolerance: 0.55 * 100 is 55.00000000000001
    return ranked[min(max(rank, 1), len(ranked)) - 1]


class Metrics:
    """Counters the server updates from its event loop and its decoding worker (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, int]] = Counter()  # (route, status) -> count
        self.latency: dict[str, deque[float]] = {}  # route -> recent seconds
        self.latency_sum: Counter[str] = Counter()
        self.batches: Counter[int] = Counter()  # bucket -> batches of at most that many sentences
        self.batch_sentences = 0
        self.batch_count = 0
        self.dropped: Counter[str] = Counter()  # reason -> jobs dropped before decoding

    def observe_request(self, path: str, status: int, seconds: float) -> None:
        route = path if path in ROUTES else "other"
        with self._lock:
            self.requests[(route, status)] += 1
            self.latency.setdefault(route, deque(maxlen=WINDOW)).append(seconds)
            self.latency_sum[route] += seconds

    def observe_batch(self, sentences: int) -> None:
        with self._lock:
            self.batch_count += 1
            self.batch_sentences += sentences
            for bound in BATCH_BUCKETS:
                if sentences <= bound:
                    self.batches[bound] += 1

    def count_dropped(self, reason: str) -> None:
        with self._lock:
            self.dropped[reason] += 1

    def render(self, queued_sentences: int, queued_requests: int) -> str:
        """The text `GET /metrics` answers."""
        with self._lock:
            lines = self._request_lines() + self._latency_lines() + self._batch_lines()
            lines += _family(
                "transduce_dropped_total", "counter", "Requests whose work was dropped"
            )
            lines += [
                f'transduce_dropped_total{{reason="{r}"}} {n}' for r, n in self.dropped.items()
            ]
        lines += _family("transduce_queue_sentences", "gauge", "Sentences waiting for the worker")
        lines.append(f"transduce_queue_sentences {queued_sentences}")
        lines += _family("transduce_queue_requests", "gauge", "Requests waiting for the worker")
        lines.append(f"transduce_queue_requests {queued_requests}")
        return "\n".join(lines) + "\n"

    def _request_lines(self) -> list[str]:
        lines = _family("transduce_requests_total", "counter", "Requests answered")
        for (route, status), n in sorted(self.requests.items()):
            lines.append(f'transduce_requests_total{{route="{route}",status="{status}"}} {n}')
        return lines

    def _latency_lines(self) -> list[str]:
        name = "transduce_request_latency_seconds"
        lines = _family(name, "summary", f"Request latency (quantiles of the last {WINDOW})")
        for route, recent in sorted(self.latency.items()):
            values = list(recent)
            for q in QUANTILES:
                value = percentile(values, q)
                lines.append(f'{name}{{route="{route}",quantile="{q}"}} {value:.6f}')
            count = self.requests_of(route)
            lines.append(f'{name}_sum{{route="{route}"}} {self.latency_sum[route]:.6f}')
            lines.append(f'{name}_count{{route="{route}"}} {count}')
        return lines

    def _batch_lines(self) -> list[str]:
        name = "transduce_batch_sentences"
        lines = _family(name, "histogram", "Sentences the worker decoded together")
        for bound in BATCH_BUCKETS:
            lines.append(f'{name}_bucket{{le="{bound}"}} {self.batches[bound]}')
        lines.append(f'{name}_bucket{{le="+Inf"}} {self.batch_count}')
        lines.append(f"{name}_sum {self.batch_sentences}")
        lines.append(f"{name}_count {self.batch_count}")
        return lines

    def requests_of(self, route: str) -> int:
        return sum(n for (r, _), n in self.requests.items() if r == route)


def _family(name: str, kind: str, summary: str) -> list[str]:
    return [f"# HELP {name} {summary}.", f"# TYPE {name} {kind}"]
