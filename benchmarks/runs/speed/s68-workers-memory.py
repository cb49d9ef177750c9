"""Session 68: the memory of `transduce translate` with its batches shared by forked workers,
against one process. The CLI runs as a user runs it; every 20 ms the proportional set size
(Pss: a page shared by n processes counts 1/n in each) of it and its children is summed, so
pages a child shares with its parent are counted once. Prints the peak sum and the time.

    python benchmarks/runs/speed/s68-workers-memory.py RUN INPUT ROUNDS
"""

import subprocess
import sys
import time
from pathlib import Path


def pss_kib(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:  # ended between the listing and the reading
        return 0
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("Pss:"))


def tree(root: int) -> list[int]:
    """The root and its children (the CLI's workers are its children)."""
    children = Path(f"/proc/{root}/task/{root}/children")
    try:
        return [root, *map(int, children.read_text().split())]
    except OSError:
        return [root]


def measure(run: str, source: str, workers: int) -> tuple[float, float]:
    command = ["transduce", "translate", "--model", run, "--input", source,
               "--output", "/tmp/s68-memory.hyp", "--workers", str(workers)]  # fmt: skip
    start, peak = time.perf_counter(), 0
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    while process.poll() is None:
        peak = max(peak, sum(pss_kib(pid) for pid in tree(process.pid)))
        time.sleep(0.02)
    if process.returncode:
        raise SystemExit(f"translate failed: {process.returncode}")
    return peak / 1024, time.perf_counter() - start


if __name__ == "__main__":
    run, source, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    for _ in range(rounds):
        for workers in (1, 0):
            mib, seconds = measure(run, source, workers)
            print(f"--workers {workers}: peak Pss {mib:,.0f} MiB, {seconds:.2f} s", flush=True)
