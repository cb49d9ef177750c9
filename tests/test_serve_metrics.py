"""What `GET /metrics` reports (serve/metrics.py), read back as a scraper reads it: requests by
route and status, latency quantiles over a window of recent requests, the histogram of batch sizes,
work dropped by reason and the queue; and the nearest-rank percentile the load test uses too."""

from __future__ import annotations

import math
import re

import pytest

from transduce.serve.metrics import BATCH_BUCKETS, WINDOW, Metrics, percentile

from .serving import metric

LATENCY = "transduce_request_latency_seconds"
BATCH = "transduce_batch_sentences"


def test_the_percentile_is_the_nearest_rank_and_nan_when_there_is_nothing():
    hundred = [float(v) for v in range(100, 0, -1)]  # unsorted on purpose
    # 0.55 * 100 is 55.00000000000001 in floating point: still the 55th value, not the 56th
    assert percentile(hundred, 0.55) == 55.0
    assert percentile(hundred, 0.95) == 95.0
    assert percentile(hundred, 0.5) == 50.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0  # rank ceil(1.5) = 2
    assert percentile([3.0, 1.0, 2.0], 0.99) == 3.0  # a rank past the last is the largest
    assert percentile([3.0, 1.0, 2.0], 1.0) == 3.0
    assert percentile([3.0, 1.0, 2.0], 1e-12) == 1.0  # never below the first: the smallest
    assert percentile([7.0], 0.5) == 7.0
    assert math.isnan(percentile([], 0.5))  # no requests yet: no number, not a zero latency


def test_requests_are_counted_by_route_and_status_and_an_unknown_path_as_other():
    metrics = Metrics()
    for path, status in [
        ("/v1/translate", 200),
        ("/v1/translate", 200),
        ("/v1/translate", 422),
        ("/v1/attention", 200),
        ("/wp-admin.php", 404),
        ("/.env", 404),
    ]:
        metrics.observe_request(path, status, 0.01)
    text = metrics.render(0, 0)
    total = "transduce_requests_total"
    assert metric(text, total, route="/v1/translate", status="200") == 2
    assert metric(text, total, route="/v1/translate", status="422") == 1
    assert metric(text, total, route="/v1/attention", status="200") == 1
    # a client probing paths adds no label values: every unknown path is one "other"
    assert metric(text, total, route="other", status="404") == 2
    assert "wp-admin" not in text and ".env" not in text
    assert metric(text, f"{LATENCY}_count", route="/v1/translate") == 3  # failures take time too


def test_each_route_reports_its_quantiles_sum_and_count_to_the_microsecond():
    metrics = Metrics()
    for seconds in (0.000120, 0.000250, 0.000500):
        metrics.observe_request("/health", 200, seconds)
    text = metrics.render(0, 0)
    quantiles = {q: metric(text, LATENCY, route="/health", quantile=q) for q in ("0.5", "0.95")}
    assert quantiles == {"0.5": pytest.approx(0.000250), "0.95": pytest.approx(0.000500)}
    assert metric(text, LATENCY, route="/health", quantile="0.99") == pytest.approx(0.0005)
    assert metric(text, f"{LATENCY}_sum", route="/health") == pytest.approx(0.00087)
    assert metric(text, f"{LATENCY}_count", route="/health") == 3


def test_the_quantiles_forget_old_requests_but_the_sum_and_count_keep_them():
    metrics = Metrics()
    for _ in range(10):
        metrics.observe_request("/v1/translate", 200, 9.0)
    for _ in range(10):
        metrics.observe_request("/v1/translate", 200, 1.0)
    assert metric(metrics.render(0, 0), LATENCY, route="/v1/translate", quantile="0.99") == 9.0
    for _ in range(WINDOW):
        metrics.observe_request("/v1/translate", 200, 1.0)
    text = metrics.render(0, 0)
    assert metric(text, LATENCY, route="/v1/translate", quantile="0.99") == 1.0  # 9 s: gone
    assert metric(text, f"{LATENCY}_count", route="/v1/translate") == WINDOW + 20
    assert metric(text, f"{LATENCY}_sum", route="/v1/translate") == 90.0 + WINDOW + 10


def test_batch_sizes_form_a_cumulative_histogram_with_their_sum_and_count():
    metrics = Metrics()
    for sentences in (1, 3, 4, 1024, 2000):
        metrics.observe_batch(sentences)
    text = metrics.render(0, 0)
    buckets = {b: metric(text, f"{BATCH}_bucket", le=str(b)) for b in BATCH_BUCKETS}
    # each bucket counts the batches of at most its bound: a bound is inclusive
    assert buckets[1] == 1 and buckets[2] == 1 and buckets[4] == 3 and buckets[8] == 3
    assert buckets[512] == 3 and buckets[1024] == 4
    assert metric(text, f"{BATCH}_bucket", le="+Inf") == 5  # 2000 is past every bound
    assert metric(text, f"{BATCH}_sum") == 1 + 3 + 4 + 1024 + 2000
    assert metric(text, f"{BATCH}_count") == 5


def test_dropped_work_is_counted_by_reason_and_the_queue_in_sentences_and_requests():
    metrics = Metrics()
    for reason in ("timeout", "disconnected", "timeout"):
        metrics.count_dropped(reason)
    text = metrics.render(7, 2)
    assert metric(text, "transduce_dropped_total", reason="timeout") == 2
    assert metric(text, "transduce_dropped_total", reason="disconnected") == 1
    assert metric(text, "transduce_queue_sentences") == 7
    assert metric(text, "transduce_queue_requests") == 2


def test_every_family_is_announced_with_its_help_and_type_and_the_text_ends_in_a_newline():
    """Prometheus's text format: a scraper takes a summary's quantiles, a histogram's buckets and
    a counter's rate by the TYPE line, and the last line, like every line, ends with `\\n`."""
    metrics = Metrics()
    metrics.observe_request("/health", 200, 0.01)
    metrics.observe_batch(2)
    metrics.count_dropped("timeout")
    text = metrics.render(0, 0)
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE))
    assert types == {
        "transduce_requests_total": "counter",
        LATENCY: "summary",
        BATCH: "histogram",
        "transduce_dropped_total": "counter",
        "transduce_queue_sentences": "gauge",
        "transduce_queue_requests": "gauge",
    }
    helped = set(re.findall(r"^# HELP (\S+) \S", text, flags=re.MULTILINE))
    assert helped == set(types)
    assert text.endswith("\n") and not text.endswith("\n\n")
