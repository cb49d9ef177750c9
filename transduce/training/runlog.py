"""A run's folder: the checks before training, the files that describe the run, the JSON-lines
log (mirrored to TensorBoard when it is installed), throughput, and the learning-curve plot."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from ..config import DROPOUT_RATES, Config
from ..data.dataset import PreparedData
from ..files import FolderBusy, FolderClaim, atomic_write, remove_leftovers
from .step import TrainingError

logger = logging.getLogger(__name__)


class RunFolderError(TrainingError):
    """The run folder cannot be used; the message says why."""


LOG_FILE = "log.jsonl"
WRITE_PROBE = ".write-test"


def check_writable(run_dir: Path) -> None:
    """Refuse before training, not after an hour, when checkpoints could not be written."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        # a name of its own: two starts at the same instant would each delete the other's probe
        with tempfile.NamedTemporaryFile(dir=run_dir, prefix=WRITE_PROBE) as probe:
            probe.write(b"x" * 1024)
            probe.flush()
    except OSError as error:
        raise RunFolderError(f"cannot write to the run folder {run_dir}: {error}") from error
    free = shutil.disk_usage(run_dir).free
    if free < 100 * 2**20:
        raise RunFolderError(f"{run_dir}: only {free // 2**20} MiB free; checkpoints need more")


def claim_run_folder(run_dir: Path) -> FolderClaim:
    """This process's hold on the run folder while it trains: a second `train` into it (the same
    `--resume` typed in two terminals) is refused before it writes anything, where it would
    otherwise delete the first one's checkpoint in flight and cut its log."""
    check_writable(run_dir)
    try:
        return FolderClaim(run_dir)
    except FolderBusy as error:
        raise RunFolderError(
            f"{run_dir}: another process is training into this folder now; wait for it to end, "
            "or name another --out"
        ) from error


# What a resumed run may change: when to stop, and the CPU threads (speed alone: a run moved to
# a machine with more cores). Anything else would change the run it continues.
RESUMABLE = ("max_steps", "max_epochs", "max_minutes", "threads")


def check_same_run(run_dir: Path, config: Config, resume: bool) -> None:
    """On resume only `RESUMABLE` may change; without resume the folder must hold no run."""
    saved = run_dir / "config.json"
    if resume and saved.exists():
        raw, previous = read_run_config(run_dir)
        if "task" not in raw:  # written before runs recorded their task: the data's stands
            previous = replace(previous, task=config.task)
        same = replace(previous.train, **{k: getattr(config.train, k) for k in RESUMABLE})
        previous = replace(previous, train=same)
        if previous != config:
            changes = setting_changes(previous, config)
            raise RunFolderError(
                f"{saved}: --resume with a different configuration ({changes}); only "
                "train.max_steps, max_epochs, max_minutes and threads may change"
            )
    elif not resume and (run_dir / "checkpoints").exists():
        raise RunFolderError(f"{run_dir} already holds a run: pass --resume or a new --out")
    else:
        _check_started_run_only(run_dir)


def setting_changes(before: Config, after: Config) -> str:
    """'model.d_ff 256 -> 128, ...': each setting that differs, by its --set name."""
    old, new = _settings(before), _settings(after)
    changed = [key for key in sorted(old.keys() | new.keys()) if old.get(key) != new.get(key)]
    return ", ".join(f"{key} {old.get(key)!r} -> {new.get(key)!r}" for key in changed)


def _settings(config: Config) -> dict[str, object]:
    """{"section.name": value}: a Config's sections hold plain values."""
    tree = dataclasses.asdict(config)
    return {
        f"{section}.{name}": v for section, values in tree.items() for name, v in values.items()
    }


# What a run writes before its first checkpoint (config.json first): a folder holding only these
# is a start that failed, which a new run may take over.
STARTED_RUN_FILES = {"config.json", "data.json", LOG_FILE, "vocab.model", "tensorboard"}


def _check_started_run_only(run_dir: Path) -> None:
    """Refuse a folder of the user's own files, which a new run would overwrite."""
    names = [p.name for p in run_dir.iterdir()] if run_dir.is_dir() else []
    entries = {name for name in names if not name.startswith(WRITE_PROBE)}
    if not entries:
        return
    foreign = sorted(entries - STARTED_RUN_FILES)
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise RunFolderError(
            f"{run_dir} holds files that are not a run's ({shown}): name a new --out"
        )
    if "config.json" in entries:
        read_run_config(run_dir)


def read_run_config(run_dir: Path) -> tuple[dict, Config]:
    """The run's config.json, as written and as a Config; else the folder is not a run's."""
    saved = run_dir / "config.json"
    try:
        raw = json.loads(saved.read_text(encoding="utf-8"))
        config = Config.from_dict(raw)
    except (OSError, ValueError) as error:  # ConfigError and JSONDecodeError are ValueErrors
        raise RunFolderError(
            f"{saved}: not a run's config.json that this transduce reads ({error}); "
            "name a new --out"
        ) from error
    return raw, config


def write_run_folder(run_dir: Path, config: Config, data: PreparedData, resume: bool) -> None:
    """Check the folder, then write (on resume: compare) what rebuilds the run's model."""
    check_writable(run_dir)
    check_same_run(run_dir, config, resume)
    remove_leftovers(run_dir)
    # Whole or not at all, even on a resume that rewrites them: a kill must not leave a run
    # folder that cannot be resumed (a truncated config.json).
    atomic_write(config.to_json().encode(), run_dir / "config.json")
    atomic_write((data.path / "vocab.model").read_bytes(), run_dir / "vocab.model")
    atomic_write(json.dumps(data.meta, indent=2).encode(), run_dir / "data.json")
    if not resume:
        keep_log_until(run_dir / LOG_FILE, 0)


class RunLog:
    """The run's records: one JSON line each in log.jsonl, and TensorBoard scalars beside it.

    TensorBoard (`pip install 'transduce[tensorboard]'`) gets `train/*` and `valid/*` scalars
    under `run_dir/tensorboard`; a resumed run hides the events a killed session wrote after its
    checkpoint, as the JSON log forgets them.
    """

    def __init__(self, run_dir: Path, resumed_at: int | None = None):
        self.path = run_dir / LOG_FILE
        self._board = _summary_writer(run_dir / "tensorboard", resumed_at)

    def write(self, record: dict) -> None:
        append_log(self.path, record)
        if self._board is not None:
            for name, value in record.items():
                if name not in ("kind", "step") and isinstance(value, int | float):
                    self._board.add_scalar(f"{record['kind']}/{name}", value, record["step"])
            self._board.flush()

    def close(self) -> None:
        if self._board is not None:
            self._board.close()


def _summary_writer(folder: Path, resumed_at: int | None):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # the optional extra is not installed: the JSON log is the record
        return None
    return SummaryWriter(str(folder), purge_step=resumed_at)


def read_log(path: Path) -> list[dict]:
    """The records of a log; a last line torn by a kill is dropped with a warning."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise RunFolderError(f"{path} line {number}: not a JSON record") from None
            logger.warning("%s: dropping an unfinished last line", path)
    return records


def keep_log_until(path: Path, step: int) -> None:
    """Forget records past `step`: a resumed run redoes them. Step 0 empties the log."""
    kept = [record for record in read_log(path) if record["step"] <= step]
    atomic_write("".join(json.dumps(record) + "\n" for record in kept).encode(), path)


def append_log(path: Path, record: dict) -> None:
    with path.open("a") as log:
        log.write(json.dumps(record) + "\n")


class Window:
    """Loss and throughput over the updates since the last log line."""

    def __init__(self) -> None:
        self.loss = self.nll = 0.0
        self.tgt_tokens = self.updates = 0
        self.restart_clock()

    def restart_clock(self) -> None:
        """Throughput counts from here: validation time is not training time."""
        self.start, self.timed_tokens = time.monotonic(), 0

    def add(self, loss: float, nll: float, tgt_tokens: int) -> None:
        self.loss += loss * tgt_tokens
        self.nll += nll * tgt_tokens
        self.tgt_tokens += tgt_tokens
        self.timed_tokens += tgt_tokens
        self.updates += 1

    def tokens_per_second(self) -> float:
        return self.timed_tokens / max(time.monotonic() - self.start, 1e-9)

    def summary(self) -> dict:
        n = max(self.tgt_tokens, 1)
        return {
            "loss": self.loss / n,
            "nll": self.nll / n,
            "tgt_tokens_per_s": round(self.tokens_per_second(), 1),
            "updates": self.updates,
        }


def plot_learning_curve(log_path: Path, png_path: Path, metric: str = "bleu") -> None:
    """Training and dev loss against updates, and the task's dev `metric` on a second axis; where
    late dropout began in the run (`train.late_dropout` in its config.json), a dotted line."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    records = read_log(log_path)
    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    figure, loss_axis = plt.subplots(figsize=(7, 4))
    loss_axis.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
    loss_axis.plot([r["step"] for r in valid], [r["loss"] for r in valid], "o-", label="dev loss")
    if begun := _dropout_begun(log_path.parent, train):  # the training loss steps up there
        loss_axis.axvline(begun, color="grey", linestyle=":", label=f"dropout from update {begun}")
    loss_axis.set_xlabel("update")
    loss_axis.set_ylabel("loss per token (label-smoothed)")
    lines, labels = loss_axis.get_legend_handles_labels()
    scored = [r for r in valid if metric in r]
    if scored:
        metric_axis = loss_axis.twinx()
        metric_axis.plot(
            [r["step"] for r in scored],
            [r[metric] for r in scored],
            "s-",
            color="C2",
            label=f"dev {metric.upper()}",
        )
        metric_axis.set_ylabel(metric.upper())
        more_lines, more_labels = metric_axis.get_legend_handles_labels()
        lines, labels = lines + more_lines, labels + more_labels
    loss_axis.legend(lines, labels, loc="center right")
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=100)
    plt.close(figure)
    atomic_write(png.getvalue(), png_path)


def _dropout_begun(run_dir: Path, train: list[dict]) -> int | None:
    """The update late dropout began at, where the run's config has it, its model has dropout
    (`models.dropout.LateDropout` begins nothing otherwise) and the run got there."""
    config_path = run_dir / "config.json"
    if not config_path.exists():
        return None
    config = Config.load(config_path)
    rates = [getattr(config.model, name, 0.0) for name in DROPOUT_RATES]
    late = config.train.late_dropout if any(rate > 0 for rate in rates) else 0
    return late + 1 if late and any(r["step"] > late for r in train) else None
