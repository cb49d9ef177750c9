"""Files a kill must not leave half-written: each is written whole beside its place under a
dot-prefixed temporary name, then renamed over it, so a reader sees the old file or the new one,
never a part. A kill between the two leaves the temporary file; `remove_leftovers` deletes such
files when their folder is next opened (each can be as large as a checkpoint). That is safe only
while one process writes the folder: `FolderClaim` makes sure of it for a run folder, and
`waiting_turn` for work that builds its folder beside it (a prepared dataset)."""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no advisory locks, and no claim (FolderClaim below)
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

# `atomic_write`'s temporary names: "." + the file's name + "." + mkstemp's random part + ".tmp"
_LEFTOVER = re.compile(r"^\..+\.[A-Za-z0-9_]+\.tmp$")
# The process's umask, read once at import (setting it is the only way to read it, and the
# setting is process-wide): files are made as `open` would make them, not mkstemp's 0600.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def atomic_write(data: bytes, path: Path) -> None:
    """Write `data` to `path` so a reader sees either the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # dot-prefixed temp name in the same directory: same filesystem for os.replace, and it
    # never matches the step_*.pt pattern, so a leftover from a kill is ignored
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # others may read a run (TensorBoard, a server, a peer)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def remove_leftovers(folder: Path) -> None:
    """Delete the temporary files that killed `atomic_write`s left in `folder`. Only for a
    folder that one process writes, when it starts: another writer's file in flight would go."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if _LEFTOVER.match(path.name) and path.is_file():
            log.info("removing %s, left by a write that was killed", path)
            path.unlink(missing_ok=True)


class FolderBusy(RuntimeError):
    """Another process holds the folder."""


class FolderClaim:
    """One process's exclusive hold on a folder it writes: an advisory lock (flock) on the
    folder itself, so no file is added to it. The kernel lets go when the process ends, however
    it ends: a killed run leaves no stale claim to clear by hand. Where the filesystem has no
    locks (some network mounts) that is logged and the work goes on unguarded."""

    def __init__(self, folder: Path) -> None:
        self._fd: int | None = os.open(folder, os.O_RDONLY)
        try:
            if fcntl is not None:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            self.release()
            raise FolderBusy(f"{folder} is held by another process") from error
        except OSError as error:
            log.warning("%s cannot be locked (%s): a second writer is not kept out", folder, error)

    def release(self) -> None:
        """Let go (closing the descriptor drops the lock); a second call does nothing."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@contextmanager
def waiting_turn(lock_file: Path, work: str) -> Iterator[None]:
    """Inside: no other process is inside a `waiting_turn` of the same `lock_file`; one that is
    first is waited for (saying so), not refused, so a second `prepare` of a dataset finds the
    first's result instead of deleting its half-built folder. The lock file is there only while
    a turn lasts: its holder deletes it before letting go, and a process that was waiting on the
    deleted file goes on to the file made after it. An advisory lock, as FolderClaim's: a killed
    holder lets go (its file stays, and is taken by the next). Where the file cannot be made or
    locked (a read-only folder, some network mounts) the work goes on unguarded."""
    try:
        fd = _take_turn(lock_file, work)
    except OSError as error:
        log.warning("%s cannot be made or locked (%s): a second %s is not kept out",
                    lock_file, error, work)  # fmt: skip
        yield
        return
    try:
        yield
    finally:
        lock_file.unlink(missing_ok=True)  # while still held: no one else holds a deleted file
        os.close(fd)  # drops the lock


def _take_turn(lock_file: Path, work: str) -> int:
    """A descriptor of `lock_file`, locked; waits while another process holds the file."""
    while True:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            _lock(fd, lock_file, work)
            if _names(fd, lock_file):
                return fd
        except OSError:
            # no lock on this mount: no process can hold the file, so none is waiting on it
            lock_file.unlink(missing_ok=True)
            os.close(fd)
            raise
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # its holder deleted it while this one waited: take the new one


def _lock(fd: int, lock_file: Path, work: str) -> None:
    """Lock `fd` exclusively, waiting (and saying so) while another process holds it."""
    if fcntl is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log.info("waiting for another %s to finish (it holds %s)", work, lock_file)
        fcntl.flock(fd, fcntl.LOCK_EX)


def _names(fd: int, path: Path) -> bool:
    """Whether `path` still names the file open as `fd`."""
    try:
        named, opened = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _fsync_dir(directory: Path) -> None:
    # os.replace is only durable once the directory entry itself reaches the disk
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:  # some filesystems refuse fsync on a directory; the rename still stands
        log.debug("fsync of directory %s failed: %s", directory, e)
    finally:
        os.close(fd)
