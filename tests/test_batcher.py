"""The server's batching worker on its own (serve/batcher.py): what it takes, what it runs
together, and what it drops, with recording `run` functions in place of decoding."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from transduce.serve.batcher import Batcher, Job, QueueFull
from transduce.serve.metrics import Metrics
from transduce.serve.settings import ServeSettings


def _job(payload, key, run, tokens: int = 1, timeout: float = 30.0, beam: int = 1) -> Job:
    future = asyncio.get_running_loop().create_future()
    return Job(payload, key, run, 1, tokens, time.monotonic() + timeout, future, beam=beam)


def _recorder(calls: list, key: str):
    def run(payloads: list) -> list:
        calls.append((key, list(payloads)))
        return [f"{key}:{p}" for p in payloads]

    return run


async def _drained(batcher: Batcher, jobs: list[Job], settle_s: float = 5.0) -> None:
    """Start the worker on what is queued, wait for `jobs` to finish, then stop it."""
    batcher.start()
    await asyncio.wait([job.future for job in jobs], timeout=settle_s)
    batcher.stop()


def test_jobs_of_equal_settings_run_as_one_call_in_arrival_order_to_the_token_budget():
    calls: list = []

    async def scenario():
        batcher = Batcher(ServeSettings(batch_tokens=10, batch_wait_ms=20), Metrics())
        k, other = _recorder(calls, "k"), _recorder(calls, "other")
        jobs = [_job(1, "k", k, 4), _job(2, "other", other, 4), _job(3, "k", k, 4)]
        jobs += [_job(4, "k", k, 4), _job(5, "k", k, 12)]  # 5 alone passes the budget: taken alone
        for job in jobs:
            batcher.submit(job)
        await _drained(batcher, jobs)
        return [job.future.result() for job in jobs], batcher.queued

    results, queued = asyncio.run(scenario())
    # 1 and 2 fill the first batch (8 of 10 tokens; 3 would pass it), 3 and 4 the second
    assert calls == [("k", [1]), ("other", [2]), ("k", [3, 4]), ("k", [5])]
    assert results == ["k:1", "other:2", "k:3", "k:4", "k:5"] and queued == (0, 0)


def test_the_worker_waits_a_little_for_company_after_the_first_job():
    calls: list = []

    async def scenario():
        batcher = Batcher(ServeSettings(batch_wait_ms=300), Metrics())
        run = _recorder(calls, "k")
        first = _job(1, "k", run)
        batcher.submit(first)
        batcher.start()
        await asyncio.sleep(0.02)  # well inside the 300 ms the first one waits
        second = _job(2, "k", run)
        batcher.submit(second)
        await asyncio.wait([first.future, second.future], timeout=2)
        batcher.stop()

    asyncio.run(scenario())
    assert calls == [("k", [1, 2])]


def test_a_job_given_up_while_another_group_runs_is_never_decoded():
    calls: list = []

    async def scenario():
        metrics = Metrics()
        batcher = Batcher(ServeSettings(batch_wait_ms=20), metrics)
        late = _job("b", "second", _recorder(calls, "second"))

        def first_then_client_leaves(payloads):
            batcher.withdraw(late, "disconnected")  # the other request's client went meanwhile
            return _recorder(calls, "first")(payloads)

        early = _job("a", "first", first_then_client_leaves)
        batcher.submit(early)
        batcher.submit(late)
        await _drained(batcher, [early])
        await asyncio.sleep(0.05)  # time for a wrongly decoded `late` to show
        return early.future.result(), late.future.done(), metrics.dropped

    result, late_settled, dropped = asyncio.run(scenario())
    assert calls == [("first", ["a"])] and result == "first:a"
    assert not late_settled and dropped == {"disconnected": 1}


def test_a_result_for_a_request_that_has_given_up_is_let_go_quietly():
    """A request answered 504 cancels its future while its work is decoded: the result finds
    it done and is dropped, with no error in the event loop."""
    problems: list = []

    async def scenario():
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: problems.append(context)
        )
        batcher = Batcher(ServeSettings(batch_wait_ms=5), Metrics())

        def gives_up_meanwhile(payloads):
            job.future.get_loop().call_soon_threadsafe(job.future.cancel)
            time.sleep(0.05)  # the cancellation lands before the result
            return payloads

        job = _job("a", "k", gives_up_meanwhile)
        batcher.submit(job)
        await _drained(batcher, [job])
        await asyncio.sleep(0.05)  # the result's delivery runs now
        return job.future.cancelled()

    assert asyncio.run(scenario()) and problems == []


def test_a_job_past_its_deadline_is_dropped_and_a_failing_call_tells_each_of_its_jobs():
    calls: list = []

    def fails(payloads):
        calls.append(("fails", list(payloads)))
        raise RuntimeError("decoding broke")

    async def scenario():
        metrics = Metrics()
        batcher = Batcher(ServeSettings(batch_wait_ms=20), metrics)
        expired = _job("old", "k", _recorder(calls, "k"), timeout=-1.0)
        broken = [_job("x", "f", fails), _job("y", "f", fails)]
        for job in (expired, *broken):
            batcher.submit(job)
        batcher.start()
        await asyncio.wait([job.future for job in broken], timeout=1)
        after = _job("z", "k", _recorder(calls, "k"))  # the worker lives on
        batcher.submit(after)
        await asyncio.wait([after.future], timeout=1)
        batcher.stop()
        return [job.future.exception() for job in broken], after.future.result(), metrics.dropped

    errors, after, dropped = asyncio.run(scenario())
    assert calls == [("fails", ["x", "y"]), ("k", ["z"])] and after == "k:z"
    assert all(isinstance(e, RuntimeError) and "decoding broke" in str(e) for e in errors)
    assert dropped == {"timeout": 1}


def test_a_full_queue_refuses_what_would_not_fit_and_a_withdrawal_frees_its_room():
    async def scenario():
        batcher = Batcher(ServeSettings(max_queue_sentences=2), Metrics())
        first, second = _job(1, "k", None), _job(2, "k", None)
        batcher.submit(first)
        batcher.submit(second)
        with pytest.raises(QueueFull, match="2 sentences waiting, at most 2"):
            batcher.submit(_job(3, "k", None))
        batcher.withdraw(first, "timeout")
        batcher.submit(_job(4, "k", None))
        return batcher.queued

    assert asyncio.run(scenario()) == (2, 2)


def test_jobs_that_fill_the_token_budget_exactly_are_taken_together_at_once():
    """The budget is inclusive: 5 + 5 tokens of a 10-token budget are one batch, taken without
    waiting out batch_wait_ms (a minute here, which the test would otherwise sit through)."""
    calls: list = []

    async def scenario():
        batcher = Batcher(ServeSettings(batch_tokens=10, batch_wait_ms=60_000), Metrics())
        run = _recorder(calls, "k")
        jobs = [_job(1, "k", run, 5), _job(2, "k", run, 5), _job(3, "k", run, 1)]
        for job in jobs:
            batcher.submit(job)
        await _drained(batcher, jobs[:2])
        return [job.future.result() for job in jobs[:2]]

    assert asyncio.run(scenario()) == ["k:1", "k:2"]
    assert calls[0] == ("k", [1, 2])


def test_one_take_is_one_batch_in_the_metrics_whatever_groups_it_splits_into():
    """Jobs taken together count as one batch of all their sentences, though jobs of other
    settings run as calls of their own; a job dropped before decoding is not counted."""
    calls: list = []

    async def scenario():
        metrics = Metrics()
        batcher = Batcher(ServeSettings(batch_tokens=100, batch_wait_ms=20), metrics)
        jobs = [_job(1, "a", _recorder(calls, "a")), _job(2, "b", _recorder(calls, "b"))]
        jobs.append(_job(3, "a", _recorder(calls, "a")))
        expired = _job(4, "c", _recorder(calls, "c"), timeout=-1.0)
        for job in (*jobs, expired):
            batcher.submit(job)
        await _drained(batcher, jobs)
        return metrics

    metrics = asyncio.run(scenario())
    assert calls == [("a", [1, 3]), ("b", [2])]
    assert (metrics.batch_count, metrics.batch_sentences) == (1, 3)
    assert metrics.batches[2] == 0 and metrics.batches[4] == 1
    assert metrics.dropped == {"timeout": 1}


def test_a_call_that_answers_the_wrong_number_of_jobs_fails_them_and_the_worker_lives_on():
    """One result for two jobs is a bug in the decoder: both requests are told, not left to
    their deadlines by a worker thread that died on it."""
    calls: list = []

    def one_short(payloads):
        calls.append(("short", list(payloads)))
        return ["only one"]

    async def scenario():
        batcher = Batcher(ServeSettings(batch_wait_ms=20), Metrics())
        short = [_job("x", "s", one_short), _job("y", "s", one_short)]
        for job in short:
            batcher.submit(job)
        batcher.start()
        await asyncio.wait([job.future for job in short], timeout=5)
        after = _job("z", "k", _recorder(calls, "k"))
        batcher.submit(after)
        await asyncio.wait([after.future], timeout=5)
        batcher.stop()
        return [job.future.exception() for job in short], after.future.result()

    errors, after = asyncio.run(scenario())
    assert all(isinstance(e, RuntimeError) and "1 results for 2 jobs" in str(e) for e in errors)
    assert after == "k:z"


def test_a_call_is_abandoned_before_the_worker_can_begin_the_next_groups():
    """`withdraw` stops a call whose every request ran out of time while it still holds the
    queue's lock: the worker cannot finish the call and begin another group's in between, so
    the stop never lands on work a live request waits for (a slow `abandon` stands in for the
    event loop's thread being switched out before its kill)."""
    import threading

    calls: list = []
    entered, may_return = threading.Event(), threading.Event()
    running_when_stopped: list = []

    async def scenario():
        metrics = Metrics()

        def slow_abandon():
            may_return.set()  # the doomed call returns now; the worker wants the lock next
            time.sleep(0.3)
            running_when_stopped.append([job.payload for job in batcher._running])

        batcher = Batcher(ServeSettings(batch_wait_ms=20), metrics, abandon=slow_abandon)

        def doomed_run(payloads):
            entered.set()
            assert may_return.wait(10)
            return _recorder(calls, "doomed")(payloads)

        doomed = _job("a", "doomed", doomed_run)
        live = _job("b", "live", _recorder(calls, "live"))
        batcher.submit(doomed)
        batcher.submit(live)
        batcher.start()
        assert await asyncio.to_thread(entered.wait, 10)
        fate = batcher.withdraw(doomed, "timeout")
        await asyncio.wait([live.future], timeout=5)
        batcher.stop()
        return fate, live.future.result(), metrics.dropped

    fate, result, dropped = asyncio.run(scenario())
    assert fate == "stopped" and running_when_stopped == [["a"]]  # still the doomed call's
    assert result == "live:b" and calls == [("doomed", ["a"]), ("live", ["b"])]
    assert dropped == {"timeout": 1}


def test_a_client_that_leaves_mid_call_does_not_stop_it_and_finished_work_is_discarded():
    """A departure costs a client nothing to cause: it never stops a call (a restart can cost
    more than the decoding left). A result already made when its request gives up is
    discarded, and counted."""
    stops: list = []

    async def scenario():
        metrics = Metrics()
        batcher = Batcher(ServeSettings(batch_wait_ms=5), metrics, abandon=lambda: stops.append(1))
        holder: list = []

        def leaves_meanwhile(payloads):
            holder.append(batcher.withdraw(job, "disconnected"))
            return [f"done:{p}" for p in payloads]

        job = _job("a", "k", leaves_meanwhile)
        batcher.submit(job)
        await _drained(batcher, [job], settle_s=1)
        late = batcher.withdraw(job, "timeout")  # its call has ended: decoded already
        return holder, late, metrics.dropped

    during, after, dropped = asyncio.run(scenario())
    assert during == ["discarded"] and after == "discarded" and stops == []
    assert dropped == {"disconnected": 1, "timeout": 1}


def test_one_request_timing_out_does_not_stop_a_call_others_still_wait_for():
    stops: list = []

    async def scenario():
        batcher = Batcher(
            ServeSettings(batch_wait_ms=20), Metrics(), abandon=lambda: stops.append(1)
        )
        holder: list = []

        def run(payloads):
            holder.append(batcher.withdraw(first, "timeout"))  # one of the two gives up
            return [f"done:{p}" for p in payloads]

        first, second = _job("a", "k", run), _job("b", "k", run)
        batcher.submit(first)
        batcher.submit(second)
        await _drained(batcher, [second])
        return holder, second.future.result()

    fates, result = asyncio.run(scenario())
    assert fates == ["discarded"] and stops == [] and result == "done:b"


def test_a_request_the_waiting_work_would_make_late_is_refused_at_once_saying_when_to_retry():
    """Work is source subwords x beam, and the decoder's speed is measured on its calls: a
    request whose wait, at that speed, would outlast its time budget is refused (429) rather
    than queued to be answered 504; one that fits is queued, and a request alone always is."""

    def slow(payloads: list) -> list:  # decodes 20 work a second: 0.05 s a subword at beam 1
        time.sleep(0.05 * sum(payloads))
        return payloads

    async def scenario():
        batcher = Batcher(ServeSettings(batch_wait_ms=1), Metrics())
        assert batcher.speed is None  # nothing measured: nothing refused
        first = _job(4, "k", slow, tokens=4)
        batcher.submit(first)
        await _drained(batcher, [first])  # measured, then the worker stops: the queue stays
        speed = batcher.speed
        assert 5 < speed <= 20  # 4 work in at least 0.2 s
        alone = _job(None, "k", slow, tokens=round(speed), beam=4, timeout=2.0)  # ~4 s of work
        batcher.submit(alone)  # an empty queue: tried, whatever the guess
        fits = _job(None, "k", slow, tokens=1, beam=4, timeout=60.0)
        batcher.submit(fits)  # ~4.2 s of work ahead of its end, inside 60 s
        with pytest.raises(QueueFull, match="server is busy") as late:
            batcher.submit(_job(None, "k", slow, tokens=1, beam=4, timeout=4.0))
        waiting = alone.work + fits.work
        return math.ceil(waiting / speed), late.value.retry_after, batcher.queued

    drained_in, retry_after, queued = asyncio.run(scenario())
    assert retry_after == drained_in  # when the work waiting now will have been decoded
    assert queued == (2, 2)  # the refused request took no place


def test_the_speed_is_the_fastest_recent_calls_so_a_slow_first_call_makes_no_burst_look_late():
    """A first call's warm-up, or a quiet server's small calls, decode slower than the full
    batches a queue is decoded in: the speed taken is the fastest of the last calls."""

    def paced(seconds_per_work: float):
        def run(payloads: list) -> list:
            time.sleep(seconds_per_work * sum(payloads))
            return payloads

        return run

    async def scenario():
        batcher = Batcher(ServeSettings(batch_wait_ms=1), Metrics())
        warm_up = _job(2, "slow", paced(0.1), tokens=2)  # 10 work a second at best
        batched = _job(50, "fast", paced(0.001), tokens=50)  # 1,000 at best
        batcher.submit(warm_up)
        batcher.start()
        await asyncio.wait([warm_up.future], timeout=5)
        batcher.submit(batched)
        await asyncio.wait([batched.future], timeout=5)
        batcher.stop()
        return batcher.speed

    assert 700 < asyncio.run(scenario()) <= 1000  # the mean of the two: ~500


def test_a_requests_own_work_and_not_withdrawn_work_counts_toward_its_wait(monkeypatch):
    """At 1 work a second, a request's wait is the work still waiting plus its own: withdrawn
    work no longer counts (it refused later requests as late), and its own does (a costly
    request with a short budget was queued to be answered 504)."""
    monkeypatch.setattr(Batcher, "speed", property(lambda self: 1.0))

    async def scenario():
        batcher = Batcher(ServeSettings(), Metrics())
        gone = _job(1, "k", None, tokens=100, timeout=300.0)
        batcher.submit(gone)
        batcher.submit(_job(2, "k", None, tokens=5, timeout=300.0))
        batcher.withdraw(gone, "timeout")
        batcher.submit(_job(3, "k", None, tokens=2, beam=2, timeout=10.0))  # 5 + 4 s: fits
        with pytest.raises(QueueFull, match="server is busy"):
            batcher.submit(_job(4, "k", None, tokens=1, beam=2, timeout=10.0))  # 9 + 2 s: late
        return batcher.queued

    assert asyncio.run(scenario()) == (2, 2)


def test_the_decoders_speed_is_measured_in_subwords_times_beam():
    """Work waiting is counted as subwords x beam, so the speed must be too: in subwords alone
    it is `beam` times too slow, and requests are refused as late that would be answered."""

    def slow(payloads: list) -> list:
        time.sleep(0.2)
        return payloads

    async def scenario():
        batcher = Batcher(ServeSettings(batch_wait_ms=1), Metrics())
        job = _job(1, "k", slow, tokens=10, beam=5)
        batcher.submit(job)
        await _drained(batcher, [job])
        return batcher.speed

    assert 50 < asyncio.run(scenario()) <= 250  # 50 work in 0.2 s or more; 10 subwords: <= 50
