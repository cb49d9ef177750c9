"""Tiny seeded fixtures: V <= 16, d_model 16, 2 layers."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from transduce.config import RnnConfig, TransformerConfig
from transduce.models import bf16, matmul
from transduce.models.rnn import RnnEncoderDecoder
from transduce.models.transformer import Transformer

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = {"bos": BOS, "eos": EOS, "pad": PAD}  # the search's keyword arguments


def padded_sources(rows: list[list[int]], width: int = 6):
    """(B, width) source ids: each row, its EOS, then padding; the sentences the search tests
    decode (four of different lengths)."""
    src = torch.full((len(rows), width), PAD)
    for i, row in enumerate(rows):
        src[i, : len(row) + 1] = torch.tensor([*row, EOS])
    return src


SENTENCES = [[4, 7, 9, 5], [6, 6, 11], [8, 5], [10, 4, 4, 7, 9]]


class SpecialIds:
    """The special ids `score_ids` needs of a vocabulary, for models over bare ids."""

    pad, bos, eos, unk = PAD, BOS, EOS, UNK


class BarePieces:
    """A vocabulary of bare pieces (the four specials first), enough for `spelling`."""

    pad, unk, bos, eos = 0, 1, 2, 3

    def __init__(self, pieces: list[str]):
        self.all = ["<pad>", "<unk>", "<s>", "</s>", *pieces]
        self.size = len(self.all)

    def pieces(self, ids):
        return [self.all[i] for i in ids]

    def text(self, ids) -> str:
        return "".join(self.pieces(ids))


def tiny_model_config(**changes) -> TransformerConfig:
    fields = dict(n_layers=2, d_model=16, d_ff=32, h=2, d_k=8, d_v=8, dropout=0.0, vocab_size=12)
    fields.update(changes)
    return TransformerConfig(**fields)


def tiny_model(seed: int = 0, dtype=torch.float64, **changes) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(tiny_model_config(**changes)).to(dtype).eval()


def tiny_rnn(seed: int = 0, dtype=torch.float64, **changes) -> RnnEncoderDecoder:
    """The recurrent family at the tiny size: 2 layers of 16 units, 8-dimensional embeddings."""
    fields = dict(n_layers=2, d_model=16, d_embed=8, dropout=0.0, vocab_size=12)
    fields.update(changes)
    torch.manual_seed(seed)
    return RnnEncoderDecoder(RnnConfig(**fields), pad=PAD).to(dtype).eval()


@pytest.fixture(autouse=True)
def product_cache_settings(monkeypatch):
    """`translate` and `serve` run in-process size the product caches for decoding in
    `os.environ`: whatever a test did, the settings are as before it once it ends."""
    for name in bf16.CACHE_SETTINGS:
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])  # restored on teardown
        else:
            monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def product_route():
    """Whatever a test did to the CPU products' route (`matmul.use_onednn`, or a torch without
    the operator patched in), the next test starts on the route as it was: torn down after
    every other fixture (until session 70 one test of test_matmul.py left it off, and every
    test after it decoded without oneDNN)."""
    route = matmul._enabled
    yield
    matmul._enabled = route


@pytest.fixture
def model() -> Transformer:
    return tiny_model()


@pytest.fixture
def data_dir() -> Path:
    """The real corpora, for tests marked `realdata`; CI points TRANSDUCE_DATA at them."""
    path = os.environ.get("TRANSDUCE_DATA")
    if not path:
        pytest.skip("TRANSDUCE_DATA is not set")
    return Path(path)


# Tiny models run fastest on one thread, and the suite then leaves a core to whatever else runs.
torch.set_num_threads(1)


# A model that trains in seconds, for plumbing: the CLI, faults, resume.
PLUMBING_MODEL = {
    "model.n_layers": 1,
    "model.d_model": 16,
    "model.d_ff": 32,
    "model.h": 2,
    "model.d_k": 8,
    "model.d_v": 8,
    "data.max_tokens": 300,
}

# One that learns the reverse task in a few hundred updates.
LEARNER_MODEL = {
    "model.n_layers": 2,
    "model.d_model": 32,
    "model.d_ff": 64,
    "model.h": 2,
    "model.d_k": 16,
    "model.d_v": 16,
    "model.dropout": 0.0,
    "data.max_tokens": 400,
    "train.warmup_steps": 60,
    "train.lr_scale": 0.15,  # a peak of 3.4e-3
}


def as_set_arguments(settings: dict) -> list[str]:
    """`{"train.max_steps": 4}` -> `["train.max_steps=4"]`, for `--set`."""
    return [f"{key}={value}" for key, value in settings.items()]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def reverse_task_files(folder: Path, n_train: int = 3000, n_dev: int = 40, seed: int = 0) -> dict:
    """A toy corpus: the target is the source's words reversed. Returns prepare's `splits`."""
    import random

    rng = random.Random(seed)
    words = ["a", "b", "c", "d", "e", "f", "g", "h"]

    def sentences(n):
        return [" ".join(rng.choice(words) for _ in range(rng.randint(2, 6))) for _ in range(n)]

    splits = {}
    for name, n in (("train", n_train), ("dev", n_dev), ("test", n_dev)):
        src = sentences(n)
        tgt = [" ".join(reversed(s.split())) for s in src]
        splits[name] = (
            write_lines(folder / f"{name}.src", src),
            write_lines(folder / f"{name}.tgt", tgt),
        )
    return splits


def prepared_reverse_task(
    folder: Path,
    n_train: int = 3000,
    n_dev: int = 40,
    vocab_size: int = 16,
    description: dict | None = None,
) -> Path:
    """The toy reverse task prepared under `folder`; returns the prepared folder."""
    from transduce.data.corpus import LengthFilter
    from transduce.data.dataset import prepare

    splits = reverse_task_files(folder, n_train, n_dev)
    data = prepare(
        splits,
        folder / "prepared",
        vocab_size=vocab_size,
        length_filter=LengthFilter(),
        description={"corpus": "toy"} if description is None else description,
    )
    return data.path


# Words long enough that a small BPE splits some of them into several pieces.
TOY_WORDS = ["the", "dog", "runs", "across", "green", "grass", "children", "playing", "outside"]


def small_reverse_data(folder: Path):
    """The reversal task prepared small (200 training pairs, 6 dev, a 16-piece vocabulary): enough
    for the experiment runners to train, score and report in seconds."""
    from transduce.data.corpus import LengthFilter
    from transduce.data.dataset import prepare

    splits = reverse_task_files(folder, n_train=200, n_dev=6)
    return prepare(
        splits, folder / "data", vocab_size=16, length_filter=LengthFilter(), description={}
    )


def toy_vocab(folder: Path, vocab_size: int = 60):
    """A sentencepiece BPE trained on sentences of TOY_WORDS; some words stay in pieces."""
    import random

    from transduce.data.bpe import train_joint

    rng = random.Random(0)
    lines = [" ".join(rng.choice(TOY_WORDS) for _ in range(rng.randint(2, 7))) for _ in range(300)]
    return train_joint(lines, vocab_size, folder / "toy")


def toy_translator(folder: Path, model=None, dtype=torch.float64):
    """A Translator over `toy_vocab` with a seeded random tiny Transformer, or `model`."""
    from transduce.config import DecodeConfig
    from transduce.decoding.translate import Translator

    vocab = toy_vocab(folder)
    if model is None:
        model = tiny_model(vocab_size=vocab.size, dtype=dtype)
    decode = DecodeConfig(beam_size=2, max_len_b=5)
    return Translator(model, vocab, decode, torch.device("cpu"))


def save_toy_model(folder: Path, decode=None) -> Path:
    """`toy_translator`'s model as one checkpoint file (float32), as training writes it, with
    `decode` (a DecodeConfig; default the run default) as its decoding settings."""
    from transduce.config import Config, DecodeConfig

    translator = toy_translator(folder, dtype=torch.float32)
    config = Config(
        model=tiny_model_config(vocab_size=translator.vocab.size), decode=decode or DecodeConfig()
    )
    return _save_checkpoint(folder / "toy.pt", config, translator.model, translator.vocab, 0)


def save_seeded_model(path: Path, vocab, seed: int, task=None, decode=None, **model) -> Path:
    """A float32 checkpoint of a seeded tiny Transformer over `vocab` (`model`: its config's
    changes), as training writes one; decoding settings `decode`, default short beams of 2."""
    from transduce.config import Config, DecodeConfig, TaskConfig

    config = Config(
        model=tiny_model_config(vocab_size=vocab.size, **model),
        decode=decode or DecodeConfig(beam_size=2, max_len_b=5),
        task=task or TaskConfig(),
    )
    torch.manual_seed(seed)
    return _save_checkpoint(path, config, Transformer(config.model, pad=vocab.pad), vocab, seed)


def _save_checkpoint(path: Path, config, model, vocab, step: int) -> Path:
    """What training writes of a model: its config, weights, vocabulary and step, one file."""
    from transduce.training.checkpoint import save

    state = {
        "config": config.to_json(),
        "model": model.state_dict(),
        "vocab": vocab.serialized,
        "step": step,
    }
    save(state, path)
    return path


# Debian's chromium package, driven by Playwright: never a browser download (CI installs it).
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium binary (Debian: apt-get install chromium)")
    playwright = pytest.importorskip("playwright.sync_api", reason="the playwright package")
    with playwright.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


def killed_at_rename(kill_at: int):
    """An `os.replace` that dies (KeyboardInterrupt, as a kill) at its `kill_at`-th call,
    before renaming: the write it belongs to is left as a kill leaves it."""
    real_replace, calls = os.replace, []

    def dying_replace(src, dst) -> None:
        calls.append(dst)
        if len(calls) == kill_at:
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    return dying_replace


def wait_for_file(path: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    """Until `path` exists (a checkpoint a training `process` writes), failing if the process
    ends first or the time runs out."""
    wait_for(path.exists, process, str(path), timeout)


def wait_for(
    ready: Callable[[], bool], process: subprocess.Popen, what: str, timeout: float = 120
) -> None:
    """Until `ready()` (`what` says what it waits for), failing if `process` ends first or the
    time runs out."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, "training ended before it could be stopped"
        assert time.monotonic() < deadline, f"{what} did not appear"
        time.sleep(0.01)
