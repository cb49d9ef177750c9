"""Training speed, side by side: transduce, OpenNMT-py and JoeyNMT, alternately (A B C A B C ...).

    python benchmarks/speed_train.py --prepared DATA --out bench/speed-train \
        --peer onmt=/path/to/onmt-venv/bin --peer joey=/path/to/joey-venv/bin \
        [--sizes small tiny] [--seconds 150] [--rounds 2] [--threads 2]

DATA is a `transduce prepare` folder (Multi30k en-de, vocabulary 8,000). Every toolkit trains on
its subword text with the same model dimensions, batch budget (4,096 tokens) and threads, for
`--seconds` of wall time per run. Throughput is each toolkit's own target-tokens/s report per
window, the first windows (start-up) left out, median over windows and rounds. Writes
OUT/results.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers

from transduce import preset
from transduce.config import override
from transduce.models import build_model, count_parameters

REPORT_EVERY = 5  # updates per throughput window, for every toolkit
SKIP_WINDOWS = 2  # start-up windows left out of the median


def transduce_command(python: str, prepared: Path, run: Path, size: str, threads: int):
    return [
        python, "-m", "transduce", "train", "--data", str(prepared), "--preset", size,
        "--out", str(run), "--max-steps", "1000000",
        # The common setup of every toolkit (peers.py), whatever the preset's own batch and dropout
        "--set", "model.pre_norm=true", f"data.max_tokens={peers.MAX_TOKENS}",
        f"model.dropout={peers.SIZES[size]['dropout']}", f"train.threads={threads}",
        f"train.log_every={REPORT_EVERY}", "train.valid_every=1000000", "train.valid_bleu=false",
    ]  # fmt: skip


def model_parameters(size: str, vocab_size: int) -> int:
    config = override(preset(size), {"model.pre_norm": "true"})
    return count_parameters(build_model(config.model, _Shape(vocab_size)))


class _Shape:
    def __init__(self, size: int):
        self.size, self.pad = size, 0


def one_run(
    toolkit: str, python_bin: Path, pieces: Path, prepared: Path, run: Path, size: str, args
) -> dict:
    run.mkdir(parents=True, exist_ok=True)
    env = peers.thread_env(args.threads)
    log = run / "stdout.log"
    if toolkit == "transduce":
        command = transduce_command(
            str(python_bin / "python"), prepared, run / "run", size, args.threads
        )
    elif toolkit == "onmt":
        config = peers.onmt_config(pieces, run, size, steps=10**6, report_every=REPORT_EVERY)
        command = [str(python_bin / "onmt_train"), "-config", str(config)]
    elif toolkit == "joey":
        config = peers.joey_config(pieces, run, size, report_every=REPORT_EVERY)
        command = [str(python_bin / "python"), "-m", "joeynmt", "train", str(config)]
    else:
        raise ValueError(toolkit)
    measured = peers.run_measured(command, log, env, seconds=args.seconds)
    text = log.read_text(errors="replace")
    windows = {
        "transduce": lambda: peers.transduce_tokens_per_s(run / "run/log.jsonl"),
        "onmt": lambda: peers.onmt_tokens_per_s(text),
        "joey": lambda: peers.joey_tokens_per_s(text),
    }[toolkit]()
    return {
        "toolkit": toolkit,
        "size": size,
        "windows": windows,
        "tokens_per_s": peers.median_after_warmup(windows, SKIP_WINDOWS),
        "peak_rss_mib": round(measured.peak_rss_mib, 1),
        "wall_s": round(measured.wall_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--peer", action="append", default=[], help="name=venv/bin (onmt, joey)")
    parser.add_argument("--sizes", nargs="+", default=["small", "tiny"])
    parser.add_argument("--seconds", type=float, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    ours = Path(sys.executable).parent
    toolkits = {"transduce": ours, **{k: Path(v) for k, v in (p.split("=", 1) for p in args.peer)}}
    pieces = peers.export_pieces(args.prepared, args.out / "pieces")
    vocab_size = len((pieces / "vocab.txt").read_text().splitlines()) + 4
    peaks = [peers.sgemm_peak(sys.executable, args.threads)]
    runs = []
    for size in args.sizes:
        for round_ in range(args.rounds):
            for toolkit, python_bin in toolkits.items():
                run = args.out / f"{size}-{toolkit}-{round_}"
                result = one_run(toolkit, python_bin, pieces, args.prepared, run, size, args)
                print(json.dumps({k: v for k, v in result.items() if k != "windows"}), flush=True)
                runs.append(result)
    peaks.append(peers.sgemm_peak(sys.executable, args.threads))
    sgemm = max(max(p.values()) for p in peaks)

    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "threads": args.threads,
        "seconds_per_run": args.seconds,
        "rounds": args.rounds,
        "sgemm_gflops": peaks,
        "sgemm_peak_gflops": round(sgemm, 1),
        "rows": [],
    }
    print(f"\nsgemm peak {sgemm:.0f} GFLOP/s ({args.threads} threads)\n")
    print(
        "| size | toolkit | target tokens/s (median) | x transduce | FLOP/s / sgemm peak "
        "| peak memory MiB |"
    )
    print("|---|---|---|---|---|---|")
    for size in args.sizes:
        params = model_parameters(size, vocab_size)
        rows = {}
        for toolkit in toolkits:
            mine = [r for r in runs if r["size"] == size and r["toolkit"] == toolkit]
            windows = [w for r in mine for w in r["windows"][SKIP_WINDOWS:]]
            rows[toolkit] = {
                "tokens_per_s": statistics.median(windows) if windows else None,
                "per_round": [r["tokens_per_s"] for r in mine],
                "peak_rss_mib": max(r["peak_rss_mib"] for r in mine),
            }
        base = rows["transduce"]["tokens_per_s"]
        for toolkit, row in rows.items():
            rate = row["tokens_per_s"]
            # 6 x parameters FLOP per target token (forward 2, backward 4), the count.
            row["sgemm_fraction"] = None if rate is None else 6 * params * rate / (sgemm * 1e9)
            row["ratio_to_transduce"] = None if rate is None or not base else rate / base
            summary["rows"].append({"size": size, "toolkit": toolkit, "parameters": params, **row})
            fmt = lambda v, f: "—" if v is None else format(v, f)  # noqa: E731
            ratio = fmt(row["ratio_to_transduce"], ".2f")
            print(
                f"| {size} | {toolkit} | {fmt(rate, ',.0f')} | {ratio} "
                f"| {fmt(row['sgemm_fraction'], '.0%')} | {row['peak_rss_mib']:,.0f} |"
            )
    (args.out / "results.json").write_text(json.dumps({**summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
