"""Checkpoints: atomic, checksummed save / load, a rotating store for resume, and averaging.

The paper averages the last 5 (base) or 20 (big) checkpoints, written every 10 minutes (s6.1).
This module owns the files that make that possible and that let `--resume` survive a kill.

State layout (a convention of training/loop.py; this module reads only "model" and "step")::

    {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": int,
     "config": Config as a JSON str, "vocab": the sentencepiece model as bytes,
     "progress": {...}, "rng": [...], ...}

Values must be what `torch.load(weights_only=True)` accepts: tensors (torch RNG states are uint8
tensors), dicts, lists, tuples (python `random.getstate()` is fine), str, int, float, bool, None,
dtypes. NumPy arrays and arbitrary objects are refused on load; convert them to lists or tensors.

File format: one header line ``TRANSDUCE-CKPT 1 <payload bytes> <sha256 hex>\\n``, then the
`torch.save` payload, so a truncated, corrupted or foreign file is detected before unpickling.

A run folder's model is ``run_dir/average.pt`` when training finished, else its newest step
(or stopped) file (`default_checkpoint`).

Store layout under ``run_dir/checkpoints/``: ``step_{step:08d}.pt``, ``best.pt`` (a copy, not a
symlink) and ``index.json``. Write order is step file, best.pt, index, then deletions, so a crash
at any point leaves every file the index names complete and verifiable; a step file holds its own
validation score, so that the run's writer takes one a kill left out of the index back in
(`recover`). A run stopped between
validations (stopping.py) leaves ``stopped_{step:08d}.pt``: resumed from, outside the rotation
and the average, and deleted by the next step file, which supersedes it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
from pathlib import Path
from typing import Any

import torch

from ..config import TrainConfig
from ..files import atomic_write, remove_leftovers
from .members import member_folders

log = logging.getLogger(__name__)

MAGIC = b"TRANSDUCE-CKPT"
VERSION = 1
_HEADER_MAX = 256  # the header is ~100 bytes; a longer first line is not ours
_STEP_FILE = re.compile(r"^step_(\d+)\.pt$")
_STOPPED_FILE = re.compile(r"^stopped_(\d+)\.pt$")
AVERAGE_FILE = "average.pt"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, truncated, corrupt, foreign or inconsistent; names the file."""


def _encode(state: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    digest = hashlib.sha256(payload).hexdigest()
    header = b"%s %d %d %s\n" % (MAGIC, VERSION, len(payload), digest.encode())
    return header + payload


def _decode_header(data: bytes, path: Path) -> tuple[int, str, bytes]:
    """Split a file into (payload length, sha256 hex, payload), or raise naming what is wrong."""
    if not data.startswith(MAGIC + b" "):
        raise CheckpointError(f"{path}: not a transduce checkpoint (bad magic)")
    end = data.find(b"\n", 0, _HEADER_MAX)
    if end < 0:
        raise CheckpointError(f"{path}: truncated or corrupt header")
    fields = data[:end].split(b" ")
    if len(fields) != 4 or not fields[1].isdigit() or not fields[2].isdigit():
        raise CheckpointError(f"{path}: malformed header {data[:end]!r}")
    if int(fields[1]) != VERSION:
        raise CheckpointError(f"{path}: format version {int(fields[1])}, expected {VERSION}")
    return int(fields[2]), fields[3].decode("ascii", "replace"), data[end + 1 :]


def save(state: dict[str, Any], path: Path) -> None:
    """Atomically write `state` to `path` with a SHA-256 checksum of its payload."""
    atomic_write(_encode(state), Path(path))


def load(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by `save`, verifying its header, length and checksum.

    Raises:
        CheckpointError: naming `path`, if it is missing, truncated, corrupt or not ours.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read: {e}") from e
    size, digest, payload = _decode_header(data, path)
    if len(payload) != size:
        raise CheckpointError(f"{path}: truncated: {len(payload)} of {size} payload bytes")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise CheckpointError(f"{path}: checksum mismatch, the payload is corrupt")
    try:
        # weights_only=True even though the checksum proves the file is ours: the checksum proves
        # integrity, not origin, and the state convention needs nothing beyond tensors, containers
        # and scalars (RNG states included), so arbitrary unpickling buys nothing but risk
        state = torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{path}: payload does not unpickle with weights_only: {e}") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: state is a {type(state).__name__}, expected a dict")
    return state


class CheckpointStore:
    """Step checkpoints under ``run_dir/checkpoints``: the last `keep_last`, plus the best.

    The step files on disk are the truth for `steps()`; ``index.json`` records their scores and
    the best score, so best tracking survives a resume. It may lag the files by one step after a
    crash, never the other way round.
    """

    def __init__(self, run_dir: Path, keep_last: int) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        self.dir = Path(run_dir) / "checkpoints"
        self.keep_last = keep_last
        self.index_path = self.dir / "index.json"
        index = self._read_index()
        self._scores: dict[int, float | None] = {e["step"]: e["score"] for e in index["steps"]}
        self._best: dict[str, Any] | None = index["best"]

    def _read_index(self) -> dict[str, Any]:
        if not self.index_path.exists():
            return {"steps": [], "best": None}
        try:
            index = json.loads(self.index_path.read_text())
            return {"steps": list(index["steps"]), "best": index["best"]}
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{self.index_path}: unreadable index: {e}") from e

    def recover(self) -> None:
        """The run's writer, before it resumes: delete what killed writes left half-done, and
        take into the index (and best.pt, if it is the best) a step file that a kill left out
        of it, with the score the file holds. Not for readers: it writes."""
        remove_leftovers(self.dir)
        missing = [step for step in self.steps() if step not in self._scores]
        for step in missing:
            try:
                validation = load(self.path(step)).get("validation") or {}
            except CheckpointError as e:  # load_latest skips it too
                log.warning("skipping unusable checkpoint: %s", e)
                continue
            score, higher = validation.get("score"), validation.get("higher", True)
            self._scores[step] = score
            if score is not None and self._is_better(score, higher):
                atomic_write(self.path(step).read_bytes(), self.best_path())
                self._best = {"step": step, "score": score, "higher_is_better": higher}
        if missing:
            log.info("took checkpoints %s, which a kill left out of the index, back in", missing)
            self._write_index(self.steps())

    def path(self, step: int) -> Path:
        return self.dir / f"step_{step:08d}.pt"

    def stopped_path(self, step: int) -> Path:
        return self.dir / f"stopped_{step:08d}.pt"

    def best_path(self) -> Path:
        return self.dir / "best.pt"

    def steps(self) -> list[int]:
        """Steps with a step file on disk, oldest first (temp files of killed writes excluded)."""
        return self._steps_named(_STEP_FILE)

    def stopped_steps(self) -> list[int]:
        """Steps with a stopped file on disk, oldest first (normally one at most)."""
        return self._steps_named(_STOPPED_FILE)

    def _steps_named(self, pattern: re.Pattern) -> list[int]:
        if not self.dir.is_dir():
            return []
        found = (pattern.match(p.name) for p in self.dir.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def newest_paths(self) -> list[Path]:
        """Step and stopped files, newest step first; at a tie, the stopped file (it is the
        later state: a validation that failed came after it)."""
        files = [(s, 1, self.stopped_path(s)) for s in self.stopped_steps()]
        files += [(s, 0, self.path(s)) for s in self.steps()]
        return [path for _, _, path in sorted(files, reverse=True)]

    def last_paths(self, k: int) -> list[Path]:
        """Paths of the newest `k` step checkpoints, oldest first; fewer if fewer exist."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return [self.path(s) for s in self.steps()[-k:]]

    def _is_better(self, score: float, higher_is_better: bool) -> bool:
        if self._best is None:
            return True
        best = self._best["score"]
        return score > best if higher_is_better else score < best

    def save(
        self, state: dict[str, Any], step: int, score: float | None, higher_is_better: bool = True
    ) -> Path:
        """Write the checkpoint for `step`, update best.pt and the index, then rotate.

        Args:
            score: validation score of this state, or None if it was not validated.
            higher_is_better: True for BLEU, False for loss / perplexity.
        """
        data = _encode(state | {"validation": {"score": score, "higher": higher_is_better}})
        path = self.path(step)
        atomic_write(data, path)
        if score is not None and self._is_better(score, higher_is_better):
            atomic_write(data, self.best_path())
            self._best = {"step": step, "score": score, "higher_is_better": higher_is_better}
        self._scores[step] = score
        doomed = self._doomed(step)
        kept = [s for s in self.steps() if s not in doomed]
        self._scores = {s: self._scores.get(s) for s in kept}
        self._write_index(kept)
        # deletions last: until the index above is on disk, the old index names these files
        for s in doomed:
            self.path(s).unlink(missing_ok=True)
        self._remove_stopped()  # superseded: this run went on from it, or from older
        return path

    def save_stopped(self, state: dict[str, Any], step: int) -> Path:
        """Write the state of a run stopped between validations, to resume from; neither
        rotated, nor best, nor averaged."""
        path = self.stopped_path(step)
        atomic_write(_encode(state | {"stopped": True}), path)
        self._remove_stopped(but=step)
        return path

    def _remove_stopped(self, but: int | None = None) -> None:
        for s in self.stopped_steps():
            if s != but:
                self.stopped_path(s).unlink(missing_ok=True)

    def _doomed(self, step: int) -> list[int]:
        """Step files to delete after saving `step`: beyond the last keep_last, or stale."""
        on_disk = self.steps()
        # files newer than `step` come from a timeline abandoned by resuming from an older one;
        # kept, they would outrank the new files in rotation and in load_latest
        stale = [s for s in on_disk if s > step]
        if stale:
            log.warning("removing checkpoints %s newer than step %d (resumed run)", stale, step)
        current = [s for s in on_disk if s <= step]
        best_step = self._best["step"] if self._best else None
        old = [s for s in current[: -self.keep_last] if s != best_step]
        return old + stale

    def _write_index(self, kept: list[int]) -> None:
        best_step = self._best["step"] if self._best else None
        entries = [
            {
                "step": s,
                "score": self._scores.get(s),
                "file": self.path(s).name,
                "best": s == best_step,
            }
            for s in kept
        ]
        index = {"steps": entries, "best": self._best}
        atomic_write(json.dumps(index, indent=1).encode() + b"\n", self.index_path)

    def load_latest(self, map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
        """The newest step or stopped checkpoint that verifies; corrupt newer ones are skipped
        with a warning.

        Returns None when no checkpoint verifies.
        """
        for path in self.newest_paths():
            try:
                return load(path, map_location)
            except CheckpointError as e:
                log.warning("skipping unusable checkpoint: %s", e)
        return None


def _accumulate(total: dict[str, Any], model: dict[str, Any], first: Path, path: Path) -> None:
    """Add float entries of `model` into `total` (float64); require other entries to be equal."""
    if model.keys() != total.keys():
        diff = sorted(set(model.keys()) ^ set(total.keys()))
        raise CheckpointError(f"{first} vs {path}: model keys differ: {diff}")
    for key, value in model.items():
        ref = total[key]
        if isinstance(ref, torch.Tensor) != isinstance(value, torch.Tensor):
            raise CheckpointError(f"{first} vs {path}: '{key}' is a tensor in only one file")
        if not isinstance(value, torch.Tensor):
            if value != ref:
                raise CheckpointError(f"{first} vs {path}: '{key}' differs")
        elif value.shape != ref.shape:
            raise CheckpointError(
                f"{first} vs {path}: '{key}' shape {tuple(value.shape)} != {tuple(ref.shape)}"
            )
        elif value.is_floating_point() != ref.is_floating_point():
            raise CheckpointError(f"{first} vs {path}: '{key}' dtype {value.dtype} differs")
        elif value.is_floating_point():
            total[key] = ref + value.to(torch.float64)
        elif not torch.equal(value, ref):
            # integer / bool buffers (counters, masks) have no meaningful mean
            raise CheckpointError(f"{first} vs {path}: integer buffer '{key}' differs")


def average(paths: list[Path]) -> dict[str, Any]:
    """Average the "model" entries of checkpoints element-wise (s6.1 checkpoint averaging).

    Files are loaded one at a time (verified), so memory stays at about two models. Float tensors
    are summed in float64 and cast back to their own dtype; other entries must be equal.

    Returns:
        The state of the newest file (largest "step", else the last path) with "model" replaced
        by the average and "averaged_from" set to the paths as strings, in the given order.
    """
    if not paths:
        raise ValueError("average needs at least one checkpoint path")
    paths = [Path(p) for p in paths]
    dtypes: dict[str, torch.dtype] = {}
    total: dict[str, Any] = {}
    newest: dict[str, Any] = {}
    for i, path in enumerate(paths):
        state = load(path)
        model = state.get("model")
        if not isinstance(model, dict):
            raise CheckpointError(f"{path}: no 'model' state dict to average")
        if i == 0:
            dtypes = {k: v.dtype for k, v in model.items() if isinstance(v, torch.Tensor)}
            total = {k: _as_sum(v) for k, v in model.items()}
        else:
            _accumulate(total, model, paths[0], path)
        if i == 0 or _step(state) >= _step(newest):
            newest = state
        del state["model"]  # keep only the newest file's other entries in memory
    mean = {k: _from_sum(v, dtypes.get(k), len(paths)) for k, v in total.items()}
    return {**newest, "model": mean, "averaged_from": [str(p) for p in paths]}


def _step(state: dict[str, Any]) -> int | float:
    # without a "step", a later path counts as newer: ties go to the later file in average()
    step = state.get("step")
    return step if isinstance(step, int) else float("-inf")


def _as_sum(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(torch.float64, copy=True)
    return value


def _from_sum(value: Any, dtype: torch.dtype | None, n: int) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return (value / n).to(dtype)
    return value


def default_checkpoint(run_dir: Path) -> Path:
    """The run's averaged model if training finished, else its newest step checkpoint."""
    run_dir = Path(run_dir)
    average_path = run_dir / AVERAGE_FILE
    if average_path.exists():
        return average_path
    if not run_dir.exists():
        raise FileNotFoundError(f"{run_dir}: no such run folder or checkpoint file")
    if (run_dir / "meta.json").is_file():
        raise FileNotFoundError(f"{run_dir}: a prepared dataset, not a run folder: train on it")
    if members := member_folders(run_dir):
        raise FileNotFoundError(
            f"{run_dir}: an ensemble of {len(members)} models (train --members): translate, score "
            f"and serve decode it whole; here name one of them, such as {members[0]}"
        )
    newest = CheckpointStore(run_dir, keep_last=1).newest_paths()
    if not newest:
        raise FileNotFoundError(f"{run_dir}: no checkpoint found (has training started?)")
    return newest[0]


def steps_to_average(kept: list[int], step: int, train: TrainConfig) -> list[int]:
    """The checkpoints (of those `kept`, oldest first) that a run ending at `step` averages.

    Checkpoints from the warmup, or from the first half of the run, are far from the end point:
    averaging them in would pull a short run back (the demo's 10 minutes: dev BLEU 31.8 averaging
    from update 250 of 852, 33.9 from 500; benchmarks/DEMO.md). Only the later ones count, the
    last `train.average_last` of them; with none, the newest kept stands. Long runs are
    unchanged: their last `average_last` checkpoints lie in the last half.
    """
    kept = [s for s in kept if s <= step]
    since = max(train.warmup_steps, step / 2)
    return [s for s in kept if s >= since][-train.average_last :] or kept[-1:]
