"""Files a kill must not leave half-written: each is written whole beside its place under a
dot-prefixed temporary name, then renamed over it, so a reader sees the old file or the new one,
never a part. A kill between the two leaves the temporary file; `remove_leftovers` deletes such
files when their folder is next opened (each can be as large as a checkpoint)."""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path

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


def _fsync_dir(directory: Path) -> None:
    # os.replace is only durable once the directory entry itself reaches the disk
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:  # some filesystems refuse fsync on a directory; the rename still stands
        log.debug("fsync of directory %s failed: %s", directory, e)
    finally:
        os.close(fd)
