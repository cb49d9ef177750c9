"""The paper's central claim, measured: attention alone against a recurrent encoder-decoder with
attention, the same data, vocabulary, batch budget, search and wall time (s1, s7).

`compare` trains each model of a pair (the Transformer preset and the recurrent preset of about
its parameter count) for the same minutes with each seed, translates the test set with the
task's search (beam 4, alpha 0.6 for translation), and writes `results.json`, `results.md` (a
table with the mean and spread over seeds) and `curve.png` (dev BLEU against wall-clock
minutes). Runs resume where they stopped; finished runs and their translations are reused.
"""

from __future__ import annotations

import json
import logging
import statistics
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from ..config import Config, DecodeConfig, override, parse_assignments
from ..data.dataset import PreparedData
from ..decoding.translate import Translator
from ..models import build_model, count_parameters
from ..models.saved import load_model
from ..presets import preset
from ..runtime import pick_device
from ..tasks import get_task
from ..training.checkpoint import AVERAGE_FILE, CheckpointStore
from ..training.loop import train
from ..training.runlog import read_log
from ..training.validation import dev_loss

logger = logging.getLogger(__name__)

PAIRS = {"tiny": ("tiny", "rnn-tiny"), "small": ("small", "rnn-small")}


@dataclass
class RunResult:
    model: str  # the preset
    seed: int
    parameters: int
    updates: int
    tokens_per_second: float  # median of the logged training windows
    test_score: float
    signature: str
    metric: str  # the task's, e.g. "bleu"
    curve: list[tuple[float, float]]  # (minutes of training, dev score)
    checkpoint: str = ""  # the file the test set was translated with (dev_chosen_checkpoint)


def compare(
    data_dir: Path,
    out: Path,
    *,
    minutes: float,
    seeds: int = 1,
    size: str = "tiny",
    overrides: dict[str, list[str]] | None = None,
    device: str | None = None,
) -> list[RunResult]:
    """Train and score both models of the pair `size` with seeds 1..`seeds`; see the module.

    `overrides` maps a preset name to `--set` style assignments for its runs only.
    """
    data, out = PreparedData.load(data_dir), Path(out)
    results = []
    for name in PAIRS[size]:
        for seed in range(1, seeds + 1):
            config = _config(name, seed, minutes, (overrides or {}).get(name, []))
            results.append(_run(config, name, seed, data, out / f"{name}-seed{seed}", device))
    write_report(results, out)
    return results


def _config(name: str, seed: int, minutes: float, assignments: list[str]) -> Config:
    limits = {"train.max_minutes": minutes, "train.max_steps": 10**9, "train.seed": seed}
    return override(override(preset(name), limits), parse_assignments(assignments))


def _run(
    config: Config, name: str, seed: int, data: PreparedData, run_dir: Path, device: str | None
) -> RunResult:
    if not (run_dir / AVERAGE_FILE).exists():  # a killed run goes on where it stopped
        resume = (run_dir / "checkpoints").exists()
        logger.info("%s seed %d: training for %s minutes", name, seed, config.train.max_minutes)
        train(config, data.path, run_dir, resume=resume, device=device)
    score = _test_score(run_dir, data, device)
    log = read_log(run_dir / "log.jsonl")
    metric = get_task(data.task).metric
    windows = [r["tgt_tokens_per_s"] for r in log if r["kind"] == "train"]
    valid = [r for r in log if r["kind"] == "valid" and metric in r]
    return RunResult(
        model=name,
        seed=seed,
        parameters=count_parameters(build_model(config.model, data.vocab)),
        updates=max((r["step"] for r in log), default=0),
        tokens_per_second=statistics.median(windows) if windows else 0.0,
        test_score=score["score"],
        signature=score["signature"],
        metric=metric,
        curve=[(r["elapsed"] / 60, r[metric]) for r in valid],
        checkpoint=score.get("checkpoint", ""),
    )


def _test_score(run_dir: Path, data: PreparedData, device: str | None) -> dict:
    """The test set translated with the run's search and scored by the task, once, from the
    checkpoint `dev_chosen_checkpoint` picks."""
    saved = run_dir / "test-score.json"
    if saved.exists():
        return json.loads(saved.read_text())
    split = "test" if "test" in data.splits else "dev"
    checkpoint, dev_nll = dev_chosen_checkpoint(run_dir, data, device)
    translator = Translator.load(run_dir, checkpoint, device=device)
    # One search for both models, the task's: not a preset's own (`tiny`'s alpha 1.0, say).
    search = get_task(data.task).decode_defaults()
    score = translate_and_score(translator, data, split, run_dir, search)
    score |= {"checkpoint": checkpoint.name, "dev_nll": dev_nll}
    saved.write_text(json.dumps(score, indent=2))
    return score


def dev_chosen_checkpoint(
    run_dir: Path, data: PreparedData, device: str | None
) -> tuple[Path, dict[str, float]]:
    """The averaged model or the newest checkpoint, whichever has the lower dev NLL, and both
    NLLs by file name. Averaging checkpoints that span a short run's fast early change can make
    a model worse than its last state (the recurrent model most: its weights are not averaged
    along one basin); the dev set, not the test set, decides which one is scored."""
    candidates = [run_dir / AVERAGE_FILE, *CheckpointStore(run_dir, keep_last=1).last_paths(1)]
    target, nll = pick_device(device), {}
    for path in candidates:
        saved = load_model(run_dir, path)
        found = dev_loss(saved.model.to(target), data, saved.config, target, nullcontext)
        nll[path.name] = found["nll"]
    return min(candidates, key=lambda path: nll[path.name]), nll


def translate_and_score(
    translator: Translator,
    data: PreparedData,
    split: str,
    out: Path,
    search: DecodeConfig | None = None,
) -> dict:
    """`split` translated with `search` (default: the translator's own), written to
    `out/{split}.hyp` and scored by the task: `{"split", "score", "signature"}`."""
    text, task = data.text(split), get_task(data.task)
    outputs = [hyps[0][0] for hyps in translator.translate(text.src, search)]
    (out / f"{split}.hyp").write_text("".join(o + "\n" for o in outputs), encoding="utf-8")
    result = task.score(outputs, task.references(data, split))
    return {"split": split, "score": result.score, "signature": result.signature}


def write_report(results: list[RunResult], out: Path) -> None:
    """results.json, results.md (mean and spread over seeds) and curve.png."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps([vars(r) for r in results], indent=2))
    (out / "results.md").write_text(_table(results))
    _plot(results, out / "curve.png")


def _table(results: list[RunResult]) -> str:
    rows = [
        "| model | parameters | seeds | updates | target tokens/s | test score (mean ± sd) "
        "| scored checkpoint (by dev NLL) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r.model for r in results):
        runs = [r for r in results if r.model == name]
        scores = [r.test_score for r in runs]
        # One seed has no spread to show: "± 0.00" would claim a measured one.
        spread = f" ± {statistics.stdev(scores):.2f}" if len(scores) > 1 else " (one seed)"
        rows.append(
            f"| {name} | {runs[0].parameters / 1e6:.2f}M | {len(runs)} "
            f"| {statistics.mean(r.updates for r in runs):,.0f} "
            f"| {statistics.mean(r.tokens_per_second for r in runs):,.0f} "
            f"| {statistics.mean(scores):.2f}{spread} "
            f"| {', '.join(sorted({r.checkpoint for r in runs}))} |"
        )
    signatures = sorted({r.signature for r in results})
    return "\n".join(rows) + "\n\nscored with " + "; ".join(signatures) + "\n"


def _plot(results: list[RunResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    colours = {name: f"C{i}" for i, name in enumerate(dict.fromkeys(r.model for r in results))}
    for r in results:
        minutes, scores = zip(*r.curve, strict=True) if r.curve else ((), ())
        label = f"{r.model} (seed {r.seed})"
        axis.plot(minutes, scores, "o-", color=colours[r.model], label=label, alpha=0.8)
    axis.set_xlabel("minutes of training")
    axis.set_ylabel(f"dev {results[0].metric.upper()} (greedy)" if results else "dev score")
    axis.legend(loc="lower right")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
