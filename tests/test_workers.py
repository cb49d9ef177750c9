"""Batches decoded side by side in forked processes (decoding/workers.py): the same output as one
process, each job once and in order, one thread a child, and a child's failure reported."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import transduce.decoding.translate as translate_module
from transduce.config import ConfigError, DecodeConfig
from transduce.decoding import workers
from transduce.decoding.prefix import Prefix
from transduce.decoding.sampling import Sampling
from transduce.decoding.translate import decode_ids
from transduce.decoding.workers import in_workers, worker_count

from .conftest import tiny_model

CPU = torch.device("cpu")
PARENT = os.getpid()


class FakeVocab:
    pad, unk, bos, eos = 0, 1, 2, 3


def children() -> set[int]:
    """This process's children, zombies included (those no one has waited for)."""
    tasks = Path("/proc/self/task")
    return {int(pid) for task in tasks.iterdir() for pid in (task / "children").read_text().split()}


@pytest.fixture(autouse=True)
def no_child_left():
    """Whatever a test does, every process it forked has ended and been reaped at its end."""
    before = children()
    yield
    assert children() <= before


@pytest.fixture
def two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def _workers_asked(monkeypatch) -> list[int]:
    """The process count each call of decode_ids hands `in_workers`."""
    asked, real = [], translate_module.in_workers

    def spy(jobs, decode, workers):
        asked.append(workers)
        return real(jobs, decode, workers)

    monkeypatch.setattr(translate_module, "in_workers", spy)
    return asked


def test_two_processes_find_what_one_finds_in_input_order(monkeypatch, two_threads):
    """Seven batches of two shared by two processes: every sentence's n best, tokens and
    scores, as one process finds them, each in its own sentence's place."""
    monkeypatch.setattr(workers, "can_fork", lambda: True)  # whatever threads other tests left
    model = tiny_model(3)
    sources = [[4 + (i * 5) % 8] * (1 + i % 6) + [5, 6][: i % 3] for i in range(13)]
    asked = _workers_asked(monkeypatch)
    decode = DecodeConfig(beam_size=3, n_best=2, batch_size=2, max_len_b=6)
    alone = decode_ids(model, FakeVocab(), sources, DecodeConfig(**{**vars(decode), "workers": 1}),
                       CPU)  # fmt: skip
    shared = decode_ids(model, FakeVocab(), sources, decode, CPU)
    assert asked == [1, 2]  # the default, 0: one process per thread torch runs
    assert shared == alone


def test_forced_prefixes_reach_each_sentence_through_the_children(monkeypatch, two_threads):
    """Each sentence's own prefix starts its outputs wherever its batch was decoded."""
    monkeypatch.setattr(workers, "can_fork", lambda: True)
    model = tiny_model(5)
    sources = [[4 + i % 6] * (1 + i % 5) for i in range(11)]
    prefixes = [Prefix(ids=(4 + (i * 3) % 7,) * (1 + i % 2)) for i in range(11)]
    decode = DecodeConfig(beam_size=2, batch_size=2, max_len_b=5)
    alone = decode_ids(model, FakeVocab(), sources, DecodeConfig(**{**vars(decode), "workers": 1}),
                       CPU, prefixes=prefixes)  # fmt: skip
    shared = decode_ids(model, FakeVocab(), sources, decode, CPU, prefixes=prefixes)
    assert shared == alone
    for found, prefix in zip(shared, prefixes, strict=True):
        assert tuple(found[0].tokens[: len(prefix.ids)]) == prefix.ids


def test_each_job_runs_once_in_order_the_children_on_one_thread(two_threads):
    """The first job here on every thread (it fills the caches the children share), the rest
    dealt out in turn to three processes, this one among them, each on one thread; this
    process's threads back afterwards."""
    done = in_workers(list(range(10)), lambda j: (j, os.getpid(), torch.get_num_threads()), 3)
    assert [job for job, _, _ in done] == list(range(10))
    assert done[0][1:] == (PARENT, 2)
    pids = [pid for _, pid, _ in done[1:]]
    assert pids[0::3] == [PARENT] * 3 and len(set(pids)) == 3
    assert pids[1::3] == [pids[1]] * 3 and pids[2::3] == [pids[2]] * 3
    assert all(threads == 1 for _, _, threads in done[1:])
    assert torch.get_num_threads() == 2


def test_how_many_processes(monkeypatch, two_threads):
    monkeypatch.setattr(workers, "can_fork", lambda: True)
    assert worker_count(0, CPU, 10) == 2  # one per thread torch runs
    assert worker_count(4, CPU, 10) == 4
    assert worker_count(4, CPU, 3) == 2  # the first batch is this process's alone
    assert worker_count(0, CPU, 2) == 1
    assert worker_count(1, CPU, 10) == 1
    assert worker_count(0, torch.device("cuda"), 10) == 1
    monkeypatch.setattr(workers, "can_fork", lambda: False)
    assert worker_count(0, CPU, 10) == 1


FORKS_WITH_A_SECOND_THREAD = """
import threading
from transduce.decoding.workers import can_fork
alone = can_fork()
release = threading.Event()
other = threading.Thread(target=release.wait)
other.start()
print(alone, can_fork())
release.set()
"""


def test_a_process_with_a_second_python_thread_does_not_fork():
    """A server's decoder thread: a lock it held at the fork would stay held in the child.
    In a fresh process, as this one may hold threads other tests left."""
    ran = subprocess.run([sys.executable, "-c", FORKS_WITH_A_SECOND_THREAD], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert ran.stdout.split() == ["True", "False"]


def test_sampling_stays_in_one_process(monkeypatch, two_threads):
    """Samples come from one random stream over all the batches in turn: never shared out."""
    monkeypatch.setattr(workers, "can_fork", lambda: True)
    asked = _workers_asked(monkeypatch)
    sources = [[4, 5], [6], [7, 8, 9], [5], [4, 4], [9]]
    decode = DecodeConfig(batch_size=1, max_len_b=4)
    decode_ids(tiny_model(1), FakeVocab(), sources, decode, CPU, sampling=Sampling(seed=1))
    assert asked == [1]


def failing_in_a_child(job: int) -> int:
    if job == 2 and os.getpid() != PARENT:
        raise ValueError("job 2 cannot be decoded")
    return job


def test_a_childs_error_is_raised_here_and_no_child_is_left(two_threads):
    with pytest.raises(ValueError, match="job 2 cannot be decoded"):
        in_workers(list(range(5)), failing_in_a_child, 2)


def test_a_killed_child_is_named_and_the_others_reaped(two_threads):
    def killed(job: int) -> int:
        if job == 2 and os.getpid() != PARENT:
            os.kill(os.getpid(), signal.SIGKILL)
        return job

    with pytest.raises(RuntimeError, match=r"worker .* was killed by SIGKILL before it sent"):
        in_workers(list(range(7)), killed, 3)


def test_an_error_here_stops_the_children(two_threads):
    def failing_here(job: int) -> int:
        if job == 3 and os.getpid() == PARENT:
            raise KeyboardInterrupt
        return job

    with pytest.raises(KeyboardInterrupt):
        in_workers(list(range(5)), failing_here, 2)


def test_an_error_that_cannot_be_pickled_comes_back_as_its_text(two_threads):
    class Local(Exception):  # defined in a function: pickle cannot find it again
        pass

    def failing(job: int) -> int:
        if os.getpid() != PARENT:
            raise Local("a local failure")
        return job

    with pytest.raises(RuntimeError, match="Local: a local failure"):
        in_workers(list(range(4)), failing, 2)


def test_a_negative_count_is_refused():
    with pytest.raises(ConfigError, match=r"decode\.workers must be >= 0"):
        DecodeConfig(workers=-1)
