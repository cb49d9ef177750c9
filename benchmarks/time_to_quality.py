"""Time to quality: wall minutes of training until dev BLEU (greedy, lowercased tokenized)
first reaches a target, transduce vs OpenNMT-py, at the `small` size.

    python benchmarks/time_to_quality.py --toolkit transduce --prepared DATA --out DIR \
        --minutes 40 [--set train.lr_scale=... ...]
    python benchmarks/time_to_quality.py --toolkit onmt --onmt-bin VENV/bin --prepared DATA \
        --out DIR --minutes 40

transduce validates every `--every` updates while it trains (its log's `elapsed`, which
includes the time of those validations). OpenNMT-py saves a checkpoint every `--every` updates
and is scored afterwards, each checkpoint at the time it was written (its validation is not
counted against it). Both decode dev greedily and are scored by the same BLEU.
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

from transduce.data.dataset import PreparedData
from transduce.tasks.metrics import bleu


def transduce_curve(args) -> list[dict]:
    run = args.out / "run"
    command = [
        sys.executable, "-m", "transduce", "train", "--data", str(args.prepared),
        "--preset", "small", "--out", str(run), "--max-minutes", str(args.minutes),
        "--max-steps", "1000000",
        "--set", f"train.valid_every={args.every}", f"train.threads={args.threads}", *args.set,
    ]  # fmt: skip
    peers.run_measured(command, args.out / "stdout.log", peers.thread_env(args.threads))
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    return [
        {"step": r["step"], "minutes": r["elapsed"] / 60, "bleu": r["bleu"]}
        for r in records
        if r["kind"] == "valid" and "bleu" in r
    ]


def onmt_curve(args) -> list[dict]:
    pieces = peers.export_pieces(args.prepared, args.out / "pieces")
    run = args.out / "run"
    config = peers.onmt_config(
        pieces, run, "small", steps=10**6, report_every=100, save_every=args.every
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
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--target", type=float, default=35.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", nargs="*", default=[], help="transduce settings, key=value")
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
        "curve": curve,
    }
    (args.out / "time-to-quality.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "curve"}, indent=2))


if __name__ == "__main__":
    main()
