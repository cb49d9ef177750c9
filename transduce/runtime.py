"""Process-level settings for speed: the device, and the CPU memory allocator."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

import torch

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_tuned = False


def pick_device(name: str | None = None) -> torch.device:
    """The named device, else a GPU when there is one, else the CPU (with its allocator tuned);
    ValueError for a name torch does not know or a GPU this machine does not have."""
    try:
        device = torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError:
        known = "use 'cpu', 'cuda' or 'cuda:N'"
        raise ValueError(f"device {name!r}: not a device name; {known}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r}: no CUDA GPU is visible here; use 'cpu'")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {name!r}: this machine has {torch.cuda.device_count()} GPU(s)")
    if device.type == "cpu":
        keep_freed_memory()
    return device


def keep_freed_memory() -> None:
    """Stop glibc from handing large blocks back to the kernel after every step.

    By default each buffer over 128 KiB is mmap-ed and unmapped when freed, so every training step
    page-faults its activations in afresh: on a 2-core CPU this cost a third of the step time
    (tiny preset, Multi30k: 3,571 -> 5,468 target tokens/s). Memory freed stays with the process.
    """
    global _tuned
    if _tuned:
        return
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30) and libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to tune
        ok = False
    _tuned = True
    logger.debug("glibc allocator tuned: %s", bool(ok))
