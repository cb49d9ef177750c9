"""Stopping a run on request without losing its work.

Ctrl-C (SIGINT) or SIGTERM, the signal a cluster's scheduler sends before it preempts a job,
does not kill training at once: the update under way ends, the run saves a checkpoint of that
step, and stops; `--resume` then continues as if it had never stopped. A second signal stops
at once, losing the updates since the newest checkpoint, as a kill would.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingStopped(KeyboardInterrupt):
    """The run stopped on request after saving its state; the message says where.

    A KeyboardInterrupt, so that whoever runs training (a sweep, the demo) stops too, as it
    would on Ctrl-C, instead of counting the run as failed and going on to the next.
    `speaks`: whether this process tells the user; under torchrun only the main one does, so the
    message is printed once."""

    def __init__(self, message: str, speaks: bool = True) -> None:
        super().__init__(message)
        self.speaks = speaks


class StopRequests:
    """Whether a stop was asked for since `listening()` began, and by which signal."""

    def __init__(self) -> None:
        self.signal_number = 0  # none yet

    @property
    def requested(self) -> bool:
        return self.signal_number != 0

    @property
    def signal_name(self) -> str | None:
        return signal.Signals(self.signal_number).name if self.requested else None

    @contextmanager
    def listening(self) -> Iterator[None]:
        """Catch SIGINT and SIGTERM while the block runs; the handlers before are restored."""
        if threading.current_thread() is not threading.main_thread():
            yield  # only the main thread may handle signals: there, they stop at once
            return
        previous = {number: signal.getsignal(number) for number in SIGNALS}
        for number in SIGNALS:
            signal.signal(number, self._handle)
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _handle(self, number: int, frame: object) -> None:
        if self.requested:  # asked twice: stop now
            raise KeyboardInterrupt(f"{signal.Signals(number).name} twice")
        self.signal_number = number
        logger.warning(
            "%s: finishing this update to save a checkpoint, then stopping (again to stop now)",
            self.signal_name,
        )
