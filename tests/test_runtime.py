"""Process settings (runtime.py): the device picked, and glibc told to keep freed memory."""

import re

import pytest
import torch

from transduce import runtime


@pytest.fixture
def tuning(monkeypatch):
    """A libc that records its mallopt calls, and a process whose allocator is not yet tuned."""
    calls = []

    class Libc:
        def mallopt(self, parameter, value):
            calls.append((parameter, value))
            return 1  # glibc: success

    monkeypatch.setattr(runtime, "_tuned", False)
    monkeypatch.setattr(runtime.ctypes, "CDLL", lambda name: Libc())
    return calls


def test_the_named_device_else_a_gpu_when_there_is_one_else_the_cpu(monkeypatch):
    tuned = []
    monkeypatch.setattr(runtime, "keep_freed_memory", lambda: tuned.append(True))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert runtime.pick_device() == torch.device("cuda")
    assert runtime.pick_device("cuda:1") == torch.device("cuda:1")
    assert tuned == []  # the allocator is tuned for the CPU only
    assert runtime.pick_device("cpu") == torch.device("cpu")
    assert tuned == [True]
    with pytest.raises(ValueError, match=r"'cuda:2': this machine has 2 GPU\(s\)"):
        runtime.pick_device("cuda:2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runtime.pick_device() == torch.device("cpu")
    assert tuned == [True, True]


@pytest.mark.parametrize(
    ("name", "says"),
    [("gpu", "not a device name; use 'cpu', 'cuda'"), ("CPU", "not a device name"),
     ("cuda", "no CUDA GPU is visible here")],
)  # fmt: skip
def test_a_device_that_is_no_name_or_not_here_is_refused_saying_what_to_use(
    monkeypatch, name, says
):
    """torch's own errors for these were a list of every backend it knows, or an assertion
    that torch was not compiled with CUDA, from deep inside the first tensor moved."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=re.escape(says)):
        runtime.pick_device(name)


def test_glibc_serves_blocks_under_a_gib_from_its_heap_and_keeps_them_tuned_once(tuning):
    runtime.keep_freed_memory()
    runtime.keep_freed_memory()
    # malloc.h: M_MMAP_THRESHOLD is -3, M_TRIM_THRESHOLD -1; both raised to 1 GiB, once.
    assert sorted(tuning) == [(-3, 1 << 30), (-1, 1 << 30)]


def test_on_a_libc_other_than_glibc_the_tuning_is_skipped_without_an_error(monkeypatch):
    monkeypatch.setattr(runtime, "_tuned", False)
    monkeypatch.setattr(runtime.ctypes, "CDLL", lambda name: object())  # macOS, musl: no mallopt
    runtime.keep_freed_memory()  # no error
    monkeypatch.setattr(runtime, "_tuned", False)

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(runtime.ctypes, "CDLL", missing)
    runtime.keep_freed_memory()
