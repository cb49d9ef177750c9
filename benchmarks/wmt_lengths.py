"""Synthetic parallel data with WMT14 English-German's sentence lengths, for speed benchmarks.

    python benchmarks/wmt_lengths.py OUT [--pairs 200000] [--vocab 37000] [--seed 1]

Multi30k's ~13-token sentences are far shorter than the news sentences the paper trained on, and
at the same 25,000 tokens a batch a GPU sees twice the sentences, half the attention span and a
different mix of kernels. No WMT data is at hand (nothing can be downloaded here), so this writes
a prepared dataset (dataset.py's layout: `vocab.model`, `train.npz`, `meta.json`) whose lengths
follow WMT14 en-de after joint BPE as commonly reported: source lengths log-normal with median
25 subwords (mean ~30, a long tail; clipped to 1..250, the usual cleaning limit), target lengths
the source's times a log-normal ratio around 1.05 (German runs a little longer than English).
Token ids are drawn from a Zipf law over the paper's shared vocabulary of 37,000: the softmax,
the embeddings' gradient and every matrix product have the real shapes, the words are noise.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from transduce.data.bpe import train_joint
from transduce.data.dataset import FORMAT

MEDIAN_SOURCE_LENGTH, LENGTH_SIGMA = 25.0, 0.6
TARGET_RATIO, RATIO_SIGMA = 1.05, 0.15
MAX_LENGTH = 250
SPECIALS = 4  # pad, unk, bos, eos come first (bpe.py)


def lengths(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) lengths of n pairs, in subwords."""
    src = rng.lognormal(np.log(MEDIAN_SOURCE_LENGTH), LENGTH_SIGMA, n)
    tgt = src * rng.lognormal(np.log(TARGET_RATIO), RATIO_SIGMA, n)
    return _whole_lengths(src), _whole_lengths(tgt)


def _whole_lengths(x: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(x), 1, MAX_LENGTH).astype(np.int64)


def synthesize(out: Path, pairs: int = 200_000, vocab_size: int = 37_000, seed: int = 1) -> Path:
    """Write the dataset to `out` (a folder PreparedData.load reads) and return it."""
    out.mkdir(parents=True, exist_ok=True)
    # One whole-token piece per word: a sentencepiece model of exactly the wanted size.
    words = [f"w{i}" for i in range(vocab_size - SPECIALS)]
    with tempfile.TemporaryDirectory() as scratch:
        lines = [" ".join(words[i : i + 50]) for i in range(0, len(words), 50)]
        vocab = train_joint(lines, vocab_size, Path(scratch) / "vocab", whole_tokens=words)
        (out / "vocab.model").write_bytes(vocab.serialized)
    rng = np.random.default_rng(seed)
    src_lengths, tgt_lengths = lengths(pairs, rng)
    zipf = 1.0 / np.arange(1, vocab.size - SPECIALS + 1)
    zipf /= zipf.sum()
    arrays = {"index": np.arange(pairs, dtype=np.int64)}
    for side, side_lengths in (("src", src_lengths), ("tgt", tgt_lengths)):
        offsets = np.zeros(pairs + 1, dtype=np.int64)
        np.cumsum(side_lengths, out=offsets[1:])
        ids = rng.choice(vocab.size - SPECIALS, size=int(offsets[-1]), p=zipf) + SPECIALS
        arrays[f"{side}_ids"], arrays[f"{side}_offsets"] = ids.astype(np.int32), offsets
    np.savez(out / "train.npz", **arrays)
    meta = {
        "format": FORMAT,
        "splits": {"train": pairs},
        "description": {
            "synthetic": "WMT14 en-de lengths (benchmarks/wmt_lengths.py)",
            "median_source_length": MEDIAN_SOURCE_LENGTH,
            "mean_source_length": float(src_lengths.mean()),
            "mean_target_length": float(tgt_lengths.mean()),
            "seed": seed,
        },
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--pairs", type=int, default=200_000)
    parser.add_argument("--vocab", type=int, default=37_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    synthesize(args.out, args.pairs, args.vocab, args.seed)
    print(json.loads((args.out / "meta.json").read_text())["description"])


if __name__ == "__main__":
    main()
