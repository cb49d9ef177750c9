"""`transduce serve` under load, against batched `transduce translate` on the same sentences.

    python benchmarks/serve_load.py --model ../bench-cmp/ende/tiny-seed1 \
        --input test_2016_flickr.en --clients 200 --requests 1000

1. Offline: the model loaded here, `Translator.translate` on every sentence at once (what
   `transduce translate --input` does: sorted by length, batches of decode.batch_size), timed.
2. Served: `python -m transduce serve` in a subprocess on loopback; `--clients` concurrent
   clients share `--requests` requests of one sentence each (the sentences in file order, again
   from the top when there are more requests than lines) and stop when all are answered.

Prints a Markdown table (throughput, p50/p95/p99 latency, their ratio to offline, answers lost,
translations that differ from offline) and writes the numbers as JSON to --json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import httpx
import torch

from transduce.decoding.translate import Translator
from transduce.serve.load import run_load


def main() -> None:
    args = _arguments()
    lines = [line.strip() for line in args.input.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if line]
    per = args.sentences_per_request
    asked = [lines[i % len(lines)] for i in range(args.requests * per)]
    torch.set_num_threads(args.threads)
    # Offline before and after the served run, the machine's other load being what it is.
    offline_texts, before = _offline(args.model, asked)
    served = {decoder: _served(args, asked, decoder) for decoder in args.decoders.split(",")}
    _, after = _offline(args.model, asked)
    offline_seconds = (before + after) / 2
    report = {
        "date": date.today().isoformat(),
        "machine": _machine(),
        "model": str(args.model),
        "threads": args.threads,
        "clients": args.clients,
        "requests": args.requests,
        "sentences_per_request": per,
        "serve_args": args.serve_args,
        "offline_seconds": [round(before, 3), round(after, 3)],
        "offline_sentences_per_s": round(len(asked) / offline_seconds, 2),
        "served": served,
    }
    for run in served.values():
        texts = run.pop("texts")
        pairs = zip(texts, offline_texts, strict=True)
        run["differ_from_offline"] = sum(a is not None and a != b for a, b in pairs)
        run["throughput_ratio"] = round(
            run["served_sentences_per_s"] / report["offline_sentences_per_s"], 3
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(_table(report))


def _arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--input", type=Path, required=True, help="one sentence a line")
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--sentences-per-request", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads, offline and served")
    p.add_argument(
        "--decoders",
        default="process,thread",
        help="`serve --decoder` settings to run, one after the other (comma-separated)",
    )
    p.add_argument(
        "--serve-args",
        default="",
        help="more `transduce serve` flags, as one string (e.g. '--request-timeout-s 2')",
    )
    p.add_argument("--log", type=Path, default=Path("/tmp/serve_load.log"), help="server's log")
    p.add_argument("--json", type=Path, required=True, help="the numbers, as JSON")
    return p.parse_args()


def _offline(model: Path, lines: list[str]) -> tuple[list[str], float]:
    translator = Translator.load(model)
    translator.translate(lines[:8])  # warm up, as the server is warm when the clients start
    started = time.perf_counter()
    found = translator.translate(lines)
    return [hyps[0][0] for hyps in found], time.perf_counter() - started


def _served(args: argparse.Namespace, lines: list[str], decoder: str) -> dict:
    port = _free_port()
    command = [sys.executable, "-m", "transduce", "-q", "serve", "--model", str(args.model)]
    command += ["--decoder", decoder, "--threads", str(args.threads), *args.serve_args.split()]
    environment = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}  # read by torch at start
    log = args.log.open("w")
    server = subprocess.Popen(
        [*command, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=environment
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(url)
        httpx.post(url + "/v1/translate", json={"texts": lines[:8]}, timeout=120)  # warm up
        per = args.sentences_per_request
        bodies = [{"texts": lines[i : i + per]} for i in range(0, len(lines), per)]
        result = run_load(url, "/v1/translate", bodies, args.clients)
        metrics = httpx.get(url + "/metrics").text
        ceiling = _http_ceiling(url, len(bodies), args.clients)
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    unanswered = [None] * per  # a refused or lost request's sentences
    texts = [
        t and t["text"] for a in result.answers for t in (a["translations"] if a else unanswered)
    ]
    return {
        "served_seconds": round(result.seconds, 3),
        "served_requests_per_s": round(result.throughput, 2),
        "served_sentences_per_s": round(result.throughput * per, 2),
        "http_ceiling_requests_per_s": round(ceiling, 1),
        "answered": result.statuses[200],
        "lost_or_refused": len(bodies) - result.statuses[200],
        "statuses": {str(status): n for status, n in result.statuses.items()},
        "p50_s": round(result.latency(0.5), 3),
        "p95_s": round(result.latency(0.95), 3),
        "p99_s": round(result.latency(0.99), 3),
        "mean_batch_sentences": round(_batch_mean(metrics), 1),
        "texts": texts,
    }


def _http_ceiling(url: str, requests: int, clients: int) -> float:
    """GET /health answered per second under the same clients: what HTTP alone allows."""
    import aiohttp

    async def load() -> float:
        todo = iter(range(requests))
        connector = aiohttp.TCPConnector(limit=clients)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def client() -> None:
                for _ in todo:
                    async with session.get(url + "/health") as answer:
                        await answer.read()

            started = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(clients)))
            return requests / (time.perf_counter() - started)

    return asyncio.run(load())


def _batch_mean(metrics: str) -> float:
    values = {}
    for line in metrics.splitlines():
        if line.startswith(("transduce_batch_sentences_sum", "transduce_batch_sentences_count")):
            name, value = line.split()
            values[name] = float(value)
    return values["transduce_batch_sentences_sum"] / values["transduce_batch_sentences_count"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(url: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health").status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"the server at {url} did not start")


def _machine() -> str:
    model = platform.processor() or "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end"


def _table(r: dict) -> str:
    rows = "".join(
        f"| `transduce serve --decoder {name}` | {run['served_sentences_per_s']} | "
        f"**{run['throughput_ratio']}** | {run['p50_s']} s | {run['p95_s']} s | {run['p99_s']} s "
        f"| {run['lost_or_refused']} | {run['differ_from_offline']} | "
        f"{run['mean_batch_sentences']} | {run['http_ceiling_requests_per_s']} |\n"
        for name, run in r["served"].items()
    )
    return (
        f"{r['date']}, {r['machine']}; {r['model']}; {r['threads']} torch thread(s); "
        f"{r['clients']} clients, {r['requests']} requests of {r['sentences_per_request']} "
        "sentence(s)\n\n"
        "| | sentences/s | ratio to offline | p50 | p95 | p99 | lost | differ from offline "
        "| mean batch | GET /health/s |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        f"| `transduce translate` (batched) | {r['offline_sentences_per_s']} | 1 | | | | | | | |\n"
        + rows
    )


if __name__ == "__main__":
    main()
