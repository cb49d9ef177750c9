"""The prepared dataset: built once, reused, rebuilt when inputs or options change (dataset.py)."""

from __future__ import annotations

import fcntl
import gzip
import json
import logging
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from transduce.config import TaskConfig
from transduce.data import dataset
from transduce.data.corpus import DataError, LengthFilter
from transduce.data.dataset import PreparedData, prepare

EN = ["a", "man", "woman", "dog", "runs", "over", "the", "green", "field", ".", ","]
DE = ["ein", "mann", "frau", "hund", "läuft", "über", "das", "grüne", "feld", ".", ","]
RULE = LengthFilter(max_len=40, max_len_ratio=9.0)


def write_gz(path: Path, lines: list[str]) -> Path:
    path.write_bytes(gzip.compress("".join(f"{line}\n" for line in lines).encode()))
    return path


def write_pair(folder: Path, name: str, src: list[str], tgt: list[str]) -> tuple[Path, Path]:
    """`{name}.en.gz` and `{name}.de.gz` in `folder`: one split's files, as `prepare` takes them."""
    return write_gz(folder / f"{name}.en.gz", src), write_gz(folder / f"{name}.de.gz", tgt)


def make_split(folder: Path, name: str, n: int, seed: int, extra: list[tuple[str, str]]) -> tuple:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        k = rng.randint(1, 10)
        pairs.append((" ".join(rng.choices(EN, k=k)), " ".join(rng.choices(DE, k=k + 1))))
    pairs += extra
    return write_pair(folder, name, [s for s, _ in pairs], [t for _, t in pairs])


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
    assert (tmp_path / "prep").stat().st_mode & 0o777 == 0o755  # not the private temporary's 0o700
    for name, n in (("dev", 22), ("test", 10)):  # never filtered: empty and long lines stay
        text = data.text(name)
        as_written = gzip.decompress(splits[name][0].read_bytes()).decode().split("\n")[:-1]
        assert text.src == as_written
        encoded = data.split(name)
        assert len(encoded) == len(text) == n
        assert np.array_equal(encoded.index, np.arange(n))
        assert data.vocab.decode([encoded.pair(i)[0] for i in range(n)]) == text.src
        assert data.vocab.decode([encoded[i][1] for i in range(n)]) == text.tgt


def test_the_train_split_keeps_the_line_of_each_pair_the_filter_kept(tmp_path, splits):
    en = ["a man runs", "", "the dog", " ".join(["man"] * 60), "the green field ."]
    de = ["ein mann läuft", "ein hund", "das hund", "ein mann", "das grüne feld ."]
    raw = tmp_path / "raw"
    train = write_pair(raw, "t", en, de)
    data = run_prepare({**splits, "train": train}, tmp_path / "prep")
    kept = data.split("train")
    assert kept.index.tolist() == [0, 2, 4]
    assert data.vocab.decode([kept[i][0] for i in range(3)]) == [en[0], en[2], en[4]]
    assert data.vocab.decode([kept[i][1] for i in range(3)]) == [de[0], de[2], de[4]]
    empty = write_pair(raw, "e", ["", "a"], ["ein", ""])
    with pytest.raises(DataError, match=r"e\.en\.gz: the length filter dropped every pair"):
        run_prepare({**splits, "train": empty}, tmp_path / "prep2")


def test_a_test_set_ending_in_an_empty_line_keeps_it(tmp_path, splits):
    raw = tmp_path / "raw"
    test = write_pair(raw, "x", ["a dog", ""], ["", "ein hund"])
    text = run_prepare({**splits, "test": test}, tmp_path / "prep").text("test")
    assert (text.src, text.tgt) == (["a dog", ""], ["", "ein hund"])


@pytest.mark.parametrize("name", ["train", "dev"])
def test_an_empty_split_is_refused_when_prepared_not_at_the_first_validation(
    tmp_path, splits, name
):
    empty = tmp_path / "raw" / "empty.gz"
    write_gz(empty, [])
    with pytest.raises(DataError, match=f"{empty}: no lines; the {name} split needs at least one"):
        run_prepare({**splits, name: (empty, empty)}, tmp_path / "prep")
    assert not (tmp_path / "prep").exists()


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


def test_another_sentencepiece_rebuilds(tmp_path, splits, monkeypatch):
    """Its BPE may split the same text otherwise, so the folder is rebuilt, not trusted."""
    first = run_prepare(splits, tmp_path / "prep").meta["fingerprint"]
    monkeypatch.setattr(dataset.sentencepiece, "__version__", "0.0.1")
    assert run_prepare(splits, tmp_path / "prep").meta["fingerprint"] != first


@pytest.mark.parametrize("meta", ["{", "[1, 2]"])
def test_a_folder_with_a_damaged_meta_is_rebuilt_and_leaves_nothing_behind(tmp_path, splits, meta):
    out = tmp_path / "prep"
    run_prepare(splits, out)
    (out / "meta.json").write_text(meta)
    assert len(run_prepare(splits, out).split("train")) == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prep", "raw"]  # no old or temporary


def test_changed_input_text_rebuilds(tmp_path, splits):
    out = tmp_path / "prep"
    run_prepare(splits, out)
    write_gz(splits["test"][1], ["anders"] * 10)
    assert run_prepare(splits, out).text("test").tgt == ["anders"] * 10


def test_an_extra_file_is_copied_and_a_change_to_its_contents_rebuilds(tmp_path, splits):
    """A parsing task's gold trees travel with the folder; new trees at the same path are new
    inputs, and `whole_tokens` are options like any other."""
    out, gold = tmp_path / "prep", tmp_path / "gold.mrg"
    gold.write_text("(S (NP x))\n")
    run_prepare(splits, out, extra_files={"gold.mrg": gold})
    assert (out / "gold.mrg").read_text() == "(S (NP x))\n"
    first = json.loads((out / "meta.json").read_text())["fingerprint"]
    gold.write_text("(S (VP y))\n")
    rebuilt = run_prepare(splits, out, extra_files={"gold.mrg": gold})
    assert (out / "gold.mrg").read_text() == "(S (VP y))\n"
    with_tokens = run_prepare(splits, out, extra_files={"gold.mrg": gold}, whole_tokens=["(S"])
    assert len({first, rebuilt.meta["fingerprint"], with_tokens.meta["fingerprint"]}) == 3


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


@pytest.mark.parametrize("damage", ["empty", "cut short", "not an archive", "no offsets"])
def test_a_damaged_split_is_named_and_not_read(tmp_path, splits, damage):
    data = run_prepare(splits, tmp_path / "prep")
    path = tmp_path / "prep" / "train.npz"
    whole = path.read_bytes()
    if damage == "no offsets":
        arrays = dict(np.load(path))
        del arrays["tgt_offsets"]
        np.savez(path, **arrays)
    else:
        path.write_bytes(
            {"empty": b"", "cut short": whole[: len(whole) // 2]}.get(damage, b"x" * 99)
        )
    with pytest.raises(DataError, match=f"{path}: not an encoded split"):
        PreparedData.load(data.path).split("train")


def test_a_folder_of_another_format_is_refused_not_misread(tmp_path, splits):
    run_prepare(splits, tmp_path / "prep")
    meta_path = tmp_path / "prep" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(meta | {"format": dataset.FORMAT + 1}))
    with pytest.raises(DataError, match=f"prepared with format {dataset.FORMAT + 1}, need"):
        PreparedData.load(tmp_path / "prep")


@pytest.mark.parametrize(("variant", "lowercase_tokens"), [("tok", True), ("raw", False)])
def test_a_folder_from_before_tasks_were_recorded_is_scored_as_its_variant(
    tmp_path, splits, variant, lowercase_tokens
):
    data = run_prepare(splits, tmp_path / "prep", task=TaskConfig(name="parse"))
    legacy = {k: v for k, v in data.meta.items() if k != "task"}
    legacy["description"] = {"corpus": "multi30k", "variant": variant}
    (tmp_path / "prep" / "meta.json").write_text(json.dumps(legacy))
    task = PreparedData.load(tmp_path / "prep").task
    assert task.name == "translation"
    assert (task.tokenize, task.lowercase) == (
        ("none", True) if lowercase_tokens else ("13a", False)
    )


def test_a_split_is_read_from_disk_once(tmp_path, splits, monkeypatch):
    """Every epoch and every validation asks for the same split: the first read serves all."""
    data = run_prepare(splits, tmp_path / "prep")
    reads = []
    load = dataset.EncodedSplit.load
    monkeypatch.setattr(dataset.EncodedSplit, "load", lambda path: reads.append(path) or load(path))
    assert data.split("train") is data.split("train")
    assert reads == [tmp_path / "prep" / "train.npz"]


def test_a_split_needs_one_line_number_per_pair():
    with pytest.raises(ValueError, match="2 sources, 2 targets and 3 lines"):
        dataset.EncodedSplit.from_sequences([[4], [5]], [[6], [7]], np.arange(3))


def test_mismatched_input_names_both_files(tmp_path, splits):
    write_gz(splits["dev"][1], ["nur eine zeile"])
    with pytest.raises(DataError) as error:
        run_prepare(splits, tmp_path / "prep")
    assert str(splits["dev"][0]) in str(error.value) and str(splits["dev"][1]) in str(error.value)


SWAP_EN = ["a dog runs", "the man walks over the field", "a woman", "the green field"]
SWAP_DE = ["ein hund läuft", "der mann geht über das feld", "eine frau", "das grüne feld"]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode()))
    return path


def test_swapping_source_and_target_files_rebuilds_the_folder(tmp_path):
    """The same two files the other way round are another dataset (de->en, not en->de): the
    fingerprint must tell them apart, or `prepare` would load the en->de folder for de->en."""
    en = _write(tmp_path / "train.en.gz", SWAP_EN * 10)
    de = _write(tmp_path / "train.de.gz", SWAP_DE * 10)
    dev_en, dev_de = (
        _write(tmp_path / "dev.en.gz", SWAP_EN),
        _write(tmp_path / "dev.de.gz", SWAP_DE),
    )
    options = {
        "vocab_size": 60,
        "length_filter": LengthFilter(max_len=40),
        "description": {"corpus": "toy"},
    }
    out = tmp_path / "prep"
    forward = prepare({"train": (en, de), "dev": (dev_en, dev_de)}, out, **options)
    backward = prepare({"train": (de, en), "dev": (dev_de, dev_en)}, out, **options)
    assert backward.meta["fingerprint"] != forward.meta["fingerprint"]
    assert backward.meta["splits"]["train"]["src_file"] == str(de)
    assert backward.text("dev").src == SWAP_DE
    src, tgt = backward.split("train").pair(0)
    assert backward.vocab.decode([src.tolist(), tgt.tolist()]) == [SWAP_DE[0], SWAP_EN[0]]


def test_prepare_deletes_the_folders_a_killed_prepare_of_the_same_out_left(tmp_path, splits):
    """A kill leaves a half-built `.prep.tmp-*` or the replaced `.prep.old-*` beside the output,
    each as large as a dataset: the next prepare of that output deletes them, and nothing
    else beside it."""
    leftovers = [tmp_path / ".prep.tmp-k1ll3d", tmp_path / ".prep.old-k1ll3d"]
    others = [tmp_path / ".prepared.tmp-k1ll3d", tmp_path / "prep-notes"]
    for folder in leftovers + others:
        folder.mkdir()
        (folder / "meta.json").write_text("{}")
    run_prepare(splits, tmp_path / "prep")
    assert [folder.exists() for folder in leftovers + others] == [False, False, True, True]


def test_a_second_prepare_of_the_same_out_waits_for_the_first_and_takes_its_dataset(
    tmp_path, splits, caplog
):
    """Two prepares of one output at once (two demos started together): the second must not
    delete the first's half-built folder as a killed prepare's leftover, nor build it again; it
    waits for the first, then loads what the first made."""
    staged = run_prepare(splits, tmp_path / "staged")  # what the first will put in place
    (staged.path / "made-by-the-first").write_text("")
    out, half_built = tmp_path / "prep", tmp_path / ".prep.tmp-first"
    half_built.mkdir()
    first = os.open(tmp_path / ".prep.lock", os.O_RDWR | os.O_CREAT)  # the first, mid-build
    fcntl.flock(first, fcntl.LOCK_EX)
    with caplog.at_level(logging.INFO), ThreadPoolExecutor(1) as pool:
        second = pool.submit(run_prepare, splits, out)
        deadline = time.monotonic() + 30
        while "waiting for another prepare of" not in caplog.text:
            assert time.monotonic() < deadline and not second.done(), second.exception()
            time.sleep(0.01)
        assert half_built.is_dir() and not out.exists()
        os.replace(staged.path, out)  # the first finishes
        half_built.rmdir()
        (tmp_path / ".prep.lock").unlink()  # as a turn ends: the waiter's file is gone
        os.close(first)
        data = second.result(timeout=30)
    assert (out / "made-by-the-first").is_file()
    assert not (tmp_path / ".prep.lock").exists()  # the second's turn ended too
    assert data.meta["fingerprint"] == staged.meta["fingerprint"]
