"""What the speed benchmarks share: the data every toolkit reads, the peers' configurations,
their log formats, peak memory of a child process, and the machine's sgemm peak.

Every toolkit trains on the same subword text: transduce's prepared data written out as
space-separated sentencepiece pieces, with one vocabulary list. A peer then sees words that
are our pieces, so vocabulary, segmentation and batch contents are the same for all.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from transduce.data.dataset import PreparedData

# The model sizes compared (issue #3): the common setup, and the `tiny` preset.
SIZES = {
    "small": dict(layers=3, d_model=256, heads=4, d_ff=1024, dropout=0.1, warmup=400, peak=1e-3),
    "tiny": dict(layers=4, d_model=128, heads=4, d_ff=256, dropout=0.3, warmup=2000, peak=5e-3),
}
MAX_TOKENS = 4096
LABEL_SMOOTHING = 0.1


def thread_env(threads: int) -> dict[str, str]:
    """The same thread count for every toolkit (torch reads OMP_NUM_THREADS at start)."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


# --- the shared data --------------------------------------------------------------------------


def export_pieces(prepared: Path, out: Path) -> Path:
    """Write train/dev/test as piece text (`train.src`, `train.tgt`, ...) and `vocab.txt`."""
    data = PreparedData.load(prepared)
    out.mkdir(parents=True, exist_ok=True)
    vocab = data.vocab
    for name in data.splits:
        split = data.split(name)
        for side in ("src", "tgt"):
            ids, offsets = getattr(split, f"{side}_ids"), getattr(split, f"{side}_offsets")
            lines = (
                " ".join(vocab.pieces(ids[offsets[i] : offsets[i + 1]])) for i in range(len(split))
            )
            (out / f"{name}.{side}").write_text("\n".join(lines) + "\n")
    specials = {vocab.pad, vocab.unk, vocab.bos, vocab.eos}
    pieces = [vocab.pieces([i])[0] for i in range(vocab.size) if i not in specials]
    (out / "vocab.txt").write_text("\n".join(pieces) + "\n")
    return out


# --- the peers' configurations ----------------------------------------------------------------


def onmt_config(
    pieces: Path, run: Path, size: str, steps: int, report_every: int, save_every: int = 0
) -> Path:
    """OpenNMT-py 3.5.1 with the common setup; its defaults otherwise (SDPA attention).

    A checkpoint every `save_every` updates; 0: only at `steps`.
    """
    s, pieces, run = SIZES[size], pieces.resolve(), run.resolve()
    config = {
        "save_data": str(run / "data"),
        "src_vocab": str(pieces / "vocab.txt"),
        "share_vocab": True,
        "src_vocab_size": 100000,
        "tgt_vocab_size": 100000,
        "data": {
            "corpus_1": {
                "path_src": str(pieces / "train.src"),
                "path_tgt": str(pieces / "train.tgt"),
            },
            "valid": {"path_src": str(pieces / "dev.src"), "path_tgt": str(pieces / "dev.tgt")},
        },
        "save_model": str(run / "model"),
        "save_checkpoint_steps": save_every or steps,
        "train_steps": steps,
        "valid_steps": 10**7,
        "report_every": report_every,
        "seed": 1,
        # Its default, 2 data-loading processes, leaves it 5x slower on 2 cores (479 target
        # tokens/s, 8.5 GB in the first 2 minutes): 0, loading in the training process, is
        # its best setting here (2,400 tokens/s).
        "num_workers": 0,
        "world_size": 1,
        "gpu_ranks": [],
        "batch_type": "tokens",
        "batch_size": MAX_TOKENS,
        "valid_batch_size": 64,
        "accum_count": [1],
        "normalization": "tokens",
        "optim": "adam",
        "adam_beta1": 0.9,
        "adam_beta2": 0.98,
        "decay_method": "noam",
        "warmup_steps": s["warmup"],
        # noam: lr * d^-0.5 * min(step^-0.5, step * warmup^-1.5); peak at step == warmup
        "learning_rate": s["peak"] * s["d_model"] ** 0.5 * s["warmup"] ** 0.5,
        "max_grad_norm": 0,
        "label_smoothing": LABEL_SMOOTHING,
        "param_init": 0,
        "param_init_glorot": True,
        "encoder_type": "transformer",
        "decoder_type": "transformer",
        "enc_layers": s["layers"],
        "dec_layers": s["layers"],
        "hidden_size": s["d_model"],
        "word_vec_size": s["d_model"],
        "transformer_ff": s["d_ff"],
        "heads": s["heads"],
        "add_qkvbias": True,  # as ours (and the paper's linear maps)
        "dropout": [s["dropout"]],
        "attention_dropout": [0.0],
        "position_encoding": True,
        "share_embeddings": True,
        "share_decoder_embeddings": True,
    }
    path = run / "onmt.yaml"
    run.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def joey_config(pieces: Path, run: Path, size: str, report_every: int) -> Path:
    """JoeyNMT 2.3.0 with the common setup, reading our pieces as words."""
    s, pieces, run = SIZES[size], pieces.resolve(), run.resolve()
    # Joey reads `<prefix>.<lang>`: link our files under language names it accepts.
    for split in ("train", "dev", "test"):
        for side in ("src", "tgt"):
            link = run / "data" / f"{split}.{side}"
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to((pieces / f"{split}.{side}").resolve())
    side = dict(level="word", lowercase=False, max_length=400, voc_file=str(pieces / "vocab.txt"))
    stack = {
        "type": "transformer",
        "num_layers": s["layers"],
        "num_heads": s["heads"],
        "embeddings": {"embedding_dim": s["d_model"], "scale": True, "dropout": s["dropout"]},
        "hidden_size": s["d_model"],
        "ff_size": s["d_ff"],
        "dropout": s["dropout"],
        "layer_norm": "pre",
    }
    config = {
        "name": "bench",
        "data": {
            "train": str(run / "data/train"),
            "dev": str(run / "data/dev"),
            "test": str(run / "data/test"),
            "dataset_type": "plain",
            "src": {"lang": "src", **side},
            "trg": {"lang": "tgt", **side},
        },
        "testing": {"beam_size": 4, "beam_alpha": 0.6, "batch_size": 64, "batch_type": "sentence"},
        "training": {
            "random_seed": 1,
            "optimizer": "adam",
            "adam_betas": [0.9, 0.98],
            "normalization": "tokens",
            "scheduling": "warmupinversesquareroot",
            "learning_rate": s["peak"],
            "learning_rate_warmup": s["warmup"],
            "learning_rate_min": 1e-9,
            "label_smoothing": LABEL_SMOOTHING,
            "loss": "crossentropy",
            "batch_size": MAX_TOKENS,
            "batch_type": "token",
            "epochs": 1000,
            "validation_freq": 10**7,
            "logging_freq": report_every,
            "model_dir": str(run / "model"),
            "overwrite": True,
            "shuffle": True,
            "use_cuda": False,
            "print_valid_sents": [],
        },
        "model": {
            "initializer": "xavier_uniform",
            "embed_initializer": "xavier_uniform",
            "bias_initializer": "zeros",
            "tied_embeddings": True,
            "tied_softmax": True,
            "encoder": stack,
            "decoder": stack,
        },
    }
    path = run / "joey.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# --- their logs ---------------------------------------------------------------------------


def onmt_tokens_per_s(log: str) -> list[float]:
    """'... 1234/ 1456 tok/s; ...' per report window: the target side (second number)."""
    return [float(m.group(2)) for m in re.finditer(r"(\d+)/\s*(\d+) tok/s", log)]


def joey_tokens_per_s(log: str) -> list[float]:
    """'Tokens per Sec:   1234' per logging window (target tokens)."""
    return [float(m.group(1)) for m in re.finditer(r"Tokens per Sec:\s*(\d+)", log)]


def transduce_tokens_per_s(log_jsonl: Path) -> list[float]:
    if not log_jsonl.exists():
        return []
    records = [json.loads(line) for line in log_jsonl.read_text().splitlines() if line.strip()]
    return [r["tgt_tokens_per_s"] for r in records if r.get("kind") == "train"]


# --- running a child and measuring it -------------------------------------------------------


@dataclass
class Measured:
    wall_s: float
    peak_rss_mib: float
    returncode: int


def run_measured(
    command: list[str], log: Path, env: dict, seconds: float | None = None
) -> Measured:
    """Run `command` with output to `log`; after `seconds`, SIGINT its process group, and
    SIGKILL it 20 s later if it is still there.

    Peak memory is the largest sum of resident memory over the child's process group, sampled
    every 0.2 s, so data-loading workers a peer forks count too.
    """
    start, interrupted, peak = time.monotonic(), None, 0
    with open(log, "w") as out:
        child = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, _group_rss_bytes(child.pid))
            now = time.monotonic()
            if seconds is not None and interrupted is None and now > start + seconds:
                os.killpg(child.pid, signal.SIGINT)
                interrupted = now
            if interrupted is not None and now > interrupted + 20:
                os.killpg(child.pid, signal.SIGKILL)
            time.sleep(0.2)
    peak = max(peak, usage.ru_maxrss * 1024)  # the main process's own peak, from the kernel
    return Measured(time.monotonic() - start, peak / 2**20, os.waitstatus_to_exitcode(status))


def _group_rss_bytes(group: int) -> int:
    total, page = 0, os.sysconf("SC_PAGE_SIZE")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group:  # pgrp, after state and ppid
                total += int((proc / "statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue  # the process ended meanwhile
    return total


def median_after_warmup(values: list[float], skip: int) -> float | None:
    """Median of the windows after the first `skip` (start-up and allocator warm-up)."""
    kept = values[skip:]
    return statistics.median(kept) if kept else None


# --- the machine ----------------------------------------------------------------------------


def cpu_identity(cpuinfo: str | None = None) -> dict[str, object]:
    """Which CPU a run was on, for its record: machines of one kind differ from session to
    session (an AMD EPYC of family 25 ran CTranslate2 2.5x faster at batch 1 than the AVX2-only
    hosts before it; SPEED.md, session 44), so the name alone does not say which it was."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.exists() else ""
    first: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        first.setdefault(key.strip(), value.strip())
    flags = set(first.get("flags", "").split())
    return {
        "name": first.get("model name", "unknown"),
        "vendor": first.get("vendor_id", "unknown"),
        "family": first.get("cpu family", "?"),
        "model": first.get("model", "?"),
        "l2_cache": first.get("cache size", "?"),
        "isa": sorted(f for f in flags if f.startswith(("avx", "amx")) or "vnni" in f),
        "cores": os.cpu_count(),
    }


SGEMM_PROBE = r"""
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
best = {}
shapes = [(4096, 256, 1024), (4096, 1024, 256), (4096, 256, 8000), (1024, 1024, 1024), (2048,) * 3]
onednn = getattr(torch.ops.mkldnn, "_linear_pointwise", None)
for m, k, n in shapes:
    a, b = torch.randn(m, k), torch.randn(k, n)
    products = {"torch": lambda: a @ b}  # torch's default: MKL's sgemm
    if onednn is not None:  # the other float32 library inside torch; a @ b as x W^T with W = b^T
        products["onednn"] = lambda: onednn(a, b.t(), None, "none", [], "")
    for library, product in products.items():
        for _ in range(3):
            product()
        times = []
        for _ in range(10):
            t = time.perf_counter(); product(); times.append(time.perf_counter() - t)
        best[f"{library} {m}x{k}x{n}"] = 2 * m * k * n / min(times) / 1e9
print(json.dumps(best))
"""


def sgemm_peak(python: str, threads: int) -> dict[str, float]:
    """float32 matrix-product GFLOP/s at the model's shapes and square ones, through MKL (torch's
    default) and oneDNN; the max over both is the machine's peak."""
    output = subprocess.run(
        [python, "-c", SGEMM_PROBE, str(threads)],
        capture_output=True,
        text=True,
        check=True,
        env=thread_env(threads),
    ).stdout
    return json.loads(output.strip().splitlines()[-1])
