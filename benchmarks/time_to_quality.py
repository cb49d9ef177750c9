"""Time to quality: wall minutes of training until dev BLEU (greedy, lowercased tokenized)
first reaches a target, transduce vs OpenNMT-py, at the `small` size.

    python benchmarks/time_to_quality.py --toolkit transduce --prepared DATA --out DIR \
        --minutes 40 [--set train.lr_scale=... ...]
    python benchmarks/time_to_quality.py --toolkit onmt --onmt-bin VENV/bin --prepared DATA \
        --out DIR --minutes 40

transduce validates every `--every` updates (default: its preset's `train.valid_every`) while
it trains (its log's `elapsed`, which includes the time of those validations). OpenNMT-py saves
a checkpoint every `--every` updates (default 250) and is scored afterwards, each checkpoint at
the time it was written (its validation is not counted against it). Both decode dev greedily
and are scored by the same BLEU.

`--averaged` also scores, at each of transduce's validations, the model a run stopped there
would have handed over: the average its training ends with (`train.average_last` checkpoints,
past the warmup and in the run's second half), rebuilt afterwards from the checkpoints it kept
(keep them all with `--set train.keep_last=...`; an average whose checkpoints the run deleted
scores None). `--score-only` scores a finished run again.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers
import torch

from transduce.data.dataset import PreparedData
from transduce.models.saved import load_model
from transduce.tasks import get_task
from transduce.tasks.metrics import bleu
from transduce.training.checkpoint import CheckpointStore, average, steps_to_average
from transduce.training.validation import dev_score


def transduce_curve(args) -> list[dict]:
    run = args.out / "run"
    if not args.score_only:
        train(args, run)
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    curve = [
        {"step": r["step"], "minutes": r["elapsed"] / 60, "bleu": r["bleu"]}
        for r in records
        if r["kind"] == "valid" and "bleu" in r
    ]
    if args.averaged:
        torch.set_num_threads(args.threads)
        data, store = PreparedData.load(args.prepared), CheckpointStore(run, keep_last=10**6)
        saved = load_model(run, store.path(store.steps()[-1]))  # the run's model and settings
        written = [point["step"] for point in curve]  # a checkpoint at every validation
        for point in curve:
            steps = steps_to_average(written, point["step"], saved.config.train)
            point["averaged_steps"] = steps
            point["bleu_averaged"] = averaged_bleu(saved, store, data, steps)
            print(point, flush=True)
    return curve


def train(args, run: Path) -> None:
    command = [
        sys.executable, "-m", "transduce", "train", "--data", str(args.prepared),
        "--preset", args.preset, "--out", str(run), "--max-minutes", str(args.minutes),
        "--max-steps", "1000000",
        "--set", f"train.threads={args.threads}",
        *([f"train.valid_every={args.every}"] if args.every else []), *args.set,
    ]  # fmt: skip
    peers.run_measured(command, args.out / "stdout.log", peers.thread_env(args.threads))


def averaged_bleu(saved, store: CheckpointStore, data: PreparedData, steps: list[int]):
    """Dev BLEU (greedy) of the average of `steps`; None where the run has since deleted one
    of them (the preset's `train.keep_last`)."""
    if not all(store.path(s).exists() for s in steps):
        return None
    saved.model.load_state_dict(average([store.path(s) for s in steps])["model"])
    task = get_task(saved.config.task)
    return dev_score(saved.model, data, saved.config, torch.device("cpu"), task)


def onmt_curve(args) -> list[dict]:
    pieces = peers.export_pieces(args.prepared, args.out / "pieces")
    run = args.out / "run"
    config = peers.onmt_config(
        pieces, run, "small", steps=10**6, report_every=100, save_every=args.every or 250
    )
    start = time.time()
    peers.run_measured(
        [str(args.onmt_bin / "onmt_train"), "-config", str(config)],
        args.out / "stdout.log",
        peers.thread_env(args.threads),
        seconds=args.minutes * 60,
    )
    data = PreparedData.load(args.prepared)
    text = data.text("dev").tgt
    references = [text[i] for i in data.split("dev").index]  # the pairs exported
    curve = []
    for checkpoint in sorted(run.glob("model_step_*.pt"), key=lambda p: int(p.stem.split("_")[-1])):
        hyp = checkpoint.with_suffix(".dev.hyp")
        subprocess.run(
            [str(args.onmt_bin / "onmt_translate"), "-model", str(checkpoint), "-src",
             str(pieces / "dev.src"), "-output", str(hyp), "-beam_size", "1", "-batch_size", "64",
             "-batch_type", "sents", "-gpu", "-1"],
            check=True, capture_output=True,
            env={**peers.thread_env(args.threads), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"},
        )  # fmt: skip
        ids = [data.vocab.piece_ids(line.split()) for line in hyp.read_text().splitlines()]
        score = bleu(data.vocab.decode(ids), references, lowercase_tokenized=True).score
        step = int(checkpoint.stem.split("_")[-1])
        curve.append(
            {"step": step, "minutes": (checkpoint.stat().st_mtime - start) / 60, "bleu": score}
        )
        print(curve[-1], flush=True)
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toolkit", choices=["transduce", "onmt"], required=True)
    parser.add_argument("--prepared", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--onmt-bin", type=Path)
    parser.add_argument("--minutes", type=float, default=40)
    parser.add_argument(
        "--every", type=int, help="updates between scores (transduce: default its preset's)"
    )
    parser.add_argument("--target", type=float, default=35.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", nargs="*", default=[], help="transduce settings, key=value")
    parser.add_argument("--preset", default="small", help="transduce's preset (default small)")
    parser.add_argument("--averaged", action="store_true", help="also score the averages")
    parser.add_argument("--score-only", action="store_true", help="score --out/run, no training")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    curve = transduce_curve(args) if args.toolkit == "transduce" else onmt_curve(args)
    reached = next((point for point in curve if point["bleu"] >= args.target), None)
    summary = {
        "toolkit": args.toolkit,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "target_bleu": args.target,
        "settings": args.set if args.toolkit == "transduce" else "benchmarks/peers.py onmt_config",
        "reached": reached,
        "reached_averaged": next(
            (point for point in curve if (point.get("bleu_averaged") or -1) >= args.target), None
        ),
        "curve": curve,
    }
    (args.out / "time-to-quality.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "curve"}, indent=2))


if __name__ == "__main__":
    main()
