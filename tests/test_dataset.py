"""The prepared dataset: built once, reused, rebuilt when inputs or options change (dataset.py)."""

from __future__ import annotations

import gzip
import json
import logging
import random
from pathlib import Path

import numpy as np
import pytest

from transduce.data import dataset
from transduce.data.corpus import DataError, LengthFilter
from transduce.data.dataset import PreparedData, prepare

EN = ["a", "man", "woman", "dog", "runs", "over", "the", "green", "field", ".", ","]
DE = ["ein", "mann", "frau", "hund", "läuft", "über", "das", "grüne", "feld", ".", ","]
RULE = LengthFilter(max_len=40, max_len_ratio=9.0)


def write_gz(path: Path, lines: list[str]) -> Path:
    path.write_bytes(gzip.compress("".join(f"{line}\n" for line in lines).encode()))
    return path


def make_split(folder: Path, name: str, n: int, seed: int, extra: list[tuple[str, str]]) -> tuple:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        k = rng.randint(1, 10)
        pairs.append((" ".join(rng.choices(EN, k=k)), " ".join(rng.choices(DE, k=k + 1))))
    pairs += extra
    src = write_gz(folder / f"{name}.en.gz", [s for s, _ in pairs])
    return src, write_gz(folder / f"{name}.de.gz", [t for _, t in pairs])


@pytest.fixture
def splits(tmp_path) -> dict[str, tuple[Path, Path]]:
    raw = tmp_path / "raw"
    raw.mkdir()
    long_line = " ".join(["man"] * 60)
    train_extra = [("", "ein hund"), ("a dog", ""), (long_line, "ein mann")]
    return {
        "train": make_split(raw, "train", 200, 0, train_extra),
        "dev": make_split(raw, "dev", 20, 1, [("", "ein hund"), (long_line, "mann")]),
        "test": make_split(raw, "test", 10, 2, []),
    }


def run_prepare(splits, out: Path, **changes) -> PreparedData:
    options = {"vocab_size": 60, "length_filter": RULE, "description": {"corpus": "toy"}}
    return prepare(splits, out, **{**options, **changes})


def test_prepare_writes_filtered_train_and_whole_dev_test(tmp_path, splits):
    data = run_prepare(splits, tmp_path / "prep")
    assert sorted(data.splits) == ["dev", "test", "train"]
    meta = json.loads((tmp_path / "prep" / "meta.json").read_text())
    assert meta["filter_report"] == {"kept": 200, "too_short": 2, "too_long": 1, "ratio": 0}
    assert meta["splits"]["train"]["lines"] == 203 and len(data.split("train")) == 200
    assert meta["description"] == {"corpus": "toy"}
    assert meta["vocab_size_actual"] == len(data.vocab)
    for name, n in (("dev", 22), ("test", 10)):  # never filtered: empty and long lines stay
        text = data.text(name)
        as_written = gzip.decompress(splits[name][0].read_bytes()).decode().split("\n")[:-1]
        assert text.src == as_written
        encoded = data.split(name)
        assert len(encoded) == len(text) == n
        assert np.array_equal(encoded.index, np.arange(n))
        assert data.vocab.decode([encoded.pair(i)[0] for i in range(n)]) == text.src
        assert data.vocab.decode([encoded[i][1] for i in range(n)]) == text.tgt


def test_lengths_and_offsets_agree(tmp_path, splits):
    train = run_prepare(splits, tmp_path / "prep").split("train")
    assert train.src_ids.dtype == np.int32 and train.src_offsets[-1] == len(train.src_ids)
    for i in (0, 57, len(train) - 1):
        src, tgt = train.pair(i)
        assert (len(src), len(tgt)) == (train.src_lengths[i], train.tgt_lengths[i])
    assert train.src_lengths.min() >= 1 and train.tgt_lengths.max() <= RULE.max_len
    assert 200 not in train.index.tolist()  # line 200 is the empty source


def test_second_prepare_loads_instead_of_retraining(tmp_path, splits, caplog):
    out = tmp_path / "prep"
    run_prepare(splits, out)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    with caplog.at_level(logging.INFO, logger="transduce.data.dataset"):
        again = run_prepare(splits, out)
    assert "loading it" in caplog.text
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    assert len(again.split("train")) == 200


@pytest.mark.parametrize(
    "changes",
    [
        {"vocab_size": 50},
        {"length_filter": LengthFilter(max_len=10)},
        {"character_coverage": 0.999},
        {"description": {"corpus": "other"}},
        {"force": True},
    ],
)
def test_a_changed_option_rebuilds(tmp_path, splits, changes):
    out = tmp_path / "prep"
    first = run_prepare(splits, out).meta["fingerprint"]
    vocab_time = (out / "vocab.model").stat().st_mtime_ns
    second = run_prepare(splits, out, **changes).meta["fingerprint"]
    assert (out / "vocab.model").stat().st_mtime_ns != vocab_time
    assert (second != first) or changes == {"force": True}


def test_changed_input_text_rebuilds(tmp_path, splits):
    out = tmp_path / "prep"
    run_prepare(splits, out)
    write_gz(splits["test"][1], ["anders"] * 10)
    assert run_prepare(splits, out).text("test").tgt == ["anders"] * 10


def test_failed_prepare_leaves_no_half_dataset(tmp_path, splits, monkeypatch):
    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    out = tmp_path / "prep"
    monkeypatch.setattr(dataset, "_write_text", crash)
    with pytest.raises(KeyboardInterrupt):
        run_prepare(splits, out)
    assert list(tmp_path.iterdir()) == [tmp_path / "raw"]  # neither `prep` nor a temp folder
    monkeypatch.undo()
    run_prepare(splits, out)
    monkeypatch.setattr(dataset, "_write_text", crash)
    with pytest.raises(KeyboardInterrupt):
        run_prepare(splits, out, vocab_size=50)
    assert PreparedData.load(out).meta["vocab_size"] == 60  # the old one is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prep", "raw"]


def test_errors_name_the_folder(tmp_path, splits):
    with pytest.raises(DataError, match=f"{tmp_path}: not a prepared dataset"):
        PreparedData.load(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(DataError, match="refusing to replace"):
        run_prepare(splits, tmp_path / "mine")
    with pytest.raises(DataError, match="needs a train split"):
        run_prepare({"dev": splits["dev"]}, tmp_path / "prep")
    data = run_prepare(splits, tmp_path / "prep")
    with pytest.raises(DataError, match="no split 'valid'"):
        data.split("valid")
    with pytest.raises(DataError, match="not kept"):
        data.text("train")


def test_mismatched_input_names_both_files(tmp_path, splits):
    write_gz(splits["dev"][1], ["nur eine zeile"])
    with pytest.raises(DataError) as error:
        run_prepare(splits, tmp_path / "prep")
    assert str(splits["dev"][0]) in str(error.value) and str(splits["dev"][1]) in str(error.value)
