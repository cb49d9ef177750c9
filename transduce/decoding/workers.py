"""A file's batches decoded side by side in forked processes, each on one thread of its own.

On a CPU the threads that share each product of a search step wait on each other: between the
products a step is many small operators and Python, which one thread runs while the others spin.
At batch 64 on a 2-core EPYC the second thread spun idle 47% of its time (SPEED.md, session 67).
Whole batches dealt out to processes of one thread each keep every core at work instead.

Forked, not spawned: a child starts in milliseconds with the model, its packed and converted
weights and the inputs already in memory, shared until written. The first batch is decoded here
before any fork, so those weight caches are filled once and shared by every child. Two rules keep
forking safe: a child never runs more than one OpenMP thread (GNU OpenMP hangs in a forked child
that starts a thread pool of its own), and only a process with a single Python thread forks (a
lock another thread held would stay held in the child): a server's decoding stays in-process.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import NoReturn, TypeVar

import torch

Job = TypeVar("Job")
Result = TypeVar("Result")


def worker_count(wanted: int, device: torch.device, jobs: int) -> int:
    """How many processes share `jobs` batches: `wanted` (0: one per thread torch runs), one
    where there is no second batch to hand out, the device is a GPU or this process may not
    fork (module docstring)."""
    if device.type != "cpu" or jobs < 3 or not can_fork():
        return 1  # the first batch is always decoded here: two more are needed to share
    return max(1, min(wanted or torch.get_num_threads(), jobs - 1))


def can_fork() -> bool:
    """Linux (macOS's frameworks are not safe across fork) with one Python thread alive."""
    return sys.platform.startswith("linux") and threading.active_count() == 1


def in_workers(jobs: Sequence[Job], decode: Callable[[Job], Result], workers: int) -> list[Result]:
    """`decode` of each job, in order. The first job here; with `workers` > 1 the rest dealt
    out in turn to that many processes, this one among them, each on one thread."""
    if workers < 2 or len(jobs) < 3:
        return [decode(job) for job in jobs]
    first = decode(jobs[0])  # with every thread: it fills the weight caches the children share
    rest = range(1, len(jobs))
    shares = [list(rest[k::workers]) for k in range(workers)]
    children: list[_Child] = []
    try:
        children = [_fork(share, jobs, decode) for share in shares[1:]]
        with _one_thread():
            done = {i: decode(jobs[i]) for i in shares[0]}
        for child in children:
            done.update(child.results())
    finally:
        for child in children:
            child.stop()
    return [first, *(done[i] for i in rest)]


@contextmanager
def _one_thread() -> Iterator[None]:
    """This process's intra-op threads down to one while its children run theirs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class _Child:
    """A forked process decoding its share; its results come back pickled through a pipe."""

    def __init__(self, pid: int, pipe: int) -> None:
        self.pid, self.pipe, self.status = pid, pipe, None

    def results(self) -> dict:
        """The child's {job index: result}; its exception raised again here, or RuntimeError
        for a child that ended without an answer (killed, out of memory)."""
        with os.fdopen(self.pipe, "rb") as pipe:
            self.pipe, answer = -1, pipe.read()
        _, self.status = os.waitpid(self.pid, 0)
        if not answer:
            raise RuntimeError(f"a decoding worker (pid {self.pid}) {_ended(self.status)} "
                               "before it sent its translations")  # fmt: skip
        kind, payload = pickle.loads(answer)
        if kind == "error":
            raise payload
        return payload

    def stop(self) -> None:
        """Kill the child if it still runs (this process is failing) and reap it."""
        if self.pipe >= 0:
            os.close(self.pipe)
        if self.status is None:
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.status = -1


def _fork(share: list[int], jobs: Sequence, decode: Callable) -> _Child:
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns of any thread at a fork: OpenMP's idle ones, which no child uses.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _child(share, jobs, decode, write_end)
    os.close(write_end)
    return _Child(pid, read_end)


def _child(share: list[int], jobs: Sequence, decode: Callable, pipe: int) -> NoReturn:
    """The forked process: decode the share on one thread, answer, and exit without running
    anything of the parent's (its exit handlers, its test runner)."""
    code = 1
    try:
        torch.set_num_threads(1)
        try:
            answer = ("results", {i: decode(jobs[i]) for i in share})
            code = 0
        except BaseException as error:  # Ctrl-C too: the parent reports it
            answer = ("error", picklable(error))
        with os.fdopen(pipe, "wb") as out:
            pickle.dump(answer, out)
    finally:
        os._exit(code)


def picklable(error: BaseException) -> BaseException:
    """`error` itself if it crosses to another process, else a RuntimeError naming it."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"
