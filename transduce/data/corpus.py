"""Named parallel corpora (a local directory or a verified download), reading them, filtering.

Owns the list of known corpora (`CORPORA`) with their public URLs, split names and line counts;
`corpus_files` to find or fetch a corpus; `read_lines` / `read_parallel` with checks that name
the file and line; and the length filter applied to training pairs before batching (s5.1).
"""

from __future__ import annotations

import gzip
import logging
import os
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")


class DataError(ValueError):
    """Bad input data; the message names the file (and the line, where there is one)."""


@dataclass(frozen=True)
class Variant:
    """One preprocessing of a corpus: where its files live upstream and locally."""

    url: str  # template with {split} (the upstream name) and {lang}
    local: str  # the same file relative to data_dir
    languages: tuple[str, ...]
    # lowercased and split into tokens already: scored as published, lowercased on those tokens
    tokenized: bool = False


@dataclass(frozen=True)
class Corpus:
    name: str
    splits: Mapping[str, str]  # our split name -> upstream split name
    lines: Mapping[str, int]  # our split name -> expected line count
    variants: Mapping[str, Variant]
    # splits a local copy may lack: they are then left out of the result
    optional_local: frozenset[str] = field(default_factory=frozenset)


_M30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1"
_ENJA = "https://raw.githubusercontent.com/odashi/small_parallel_enja/master"

CORPORA: dict[str, Corpus] = {
    "multi30k": Corpus(
        name="multi30k",
        splits={"train": "train", "dev": "val", "test": "test_2016_flickr"},
        lines={"train": 29000, "dev": 1014, "test": 1000},
        variants={
            "raw": Variant(
                url=_M30K + "/raw/{split}.{lang}.gz",
                local="multi30k/{split}.{lang}.gz",
                languages=("en", "de", "fr", "cs"),
            ),
            # lowercased, punctuation-normalised, Moses-tokenized: as published baselines
            "tok": Variant(
                url=_M30K + "/tok/{split}.lc.norm.tok.{lang}.gz",
                local="multi30k/tok/{split}.lc.norm.tok.{lang}.gz",
                languages=("en", "de", "fr"),
                tokenized=True,
            ),
        },
    ),
    "small_parallel_enja": Corpus(
        name="small_parallel_enja",
        splits={"train": "train", "dev": "dev", "test": "test"},
        lines={"train": 50000, "dev": 500, "test": 500},
        variants={
            # upstream files are plain text, lowercased and tokenized; local copies are gzipped
            "raw": Variant(
                url=_ENJA + "/{split}.{lang}",
                local="small_parallel_enja/{split}.{lang}.gz",
                languages=("en", "ja"),
                tokenized=True,
            ),
        },
        optional_local=frozenset({"test"}),
    ),
}


def corpus_files(
    corpus: str,
    src: str,
    tgt: str,
    *,
    variant: str = "raw",
    data_dir: Path | None = None,
    cache_dir: Path | None = None,
) -> dict[str, tuple[Path, Path]]:
    """The (src, tgt) files of each split, `{"train": ..., "dev": ..., "test": ...}`.

    With `data_dir` (the folder holding `multi30k/` and `small_parallel_enja/`) the local copies
    are used; otherwise each file is downloaded once into `cache_dir` (default `$TRANSDUCE_CACHE`
    or `~/.cache/transduce`), verified, and reused on later calls.
    """
    spec, var = _lookup(corpus, src, tgt, variant)
    if data_dir is not None:
        return _local_files(spec, var, src, tgt, Path(data_dir))
    root = Path(cache_dir) if cache_dir is not None else _default_cache()
    folder = root / spec.name / variant
    files = {}
    for split, upstream in spec.splits.items():
        pair = [
            _fetch(var.url.format(split=upstream, lang=lang), folder, spec.lines[split])
            for lang in (src, tgt)
        ]
        files[split] = (pair[0], pair[1])
    return files


def is_tokenized(corpus: str, variant: str = "raw") -> bool:
    """Whether a named corpus's text is lowercased and tokenized already (as Multi30k's `tok`)."""
    spec = CORPORA.get(corpus)
    return bool(spec and variant in spec.variants and spec.variants[variant].tokenized)


def _lookup(corpus: str, src: str, tgt: str, variant: str) -> tuple[Corpus, Variant]:
    if corpus not in CORPORA:
        raise DataError(f"unknown corpus {corpus!r}; choose from {', '.join(sorted(CORPORA))}")
    spec = CORPORA[corpus]
    if variant not in spec.variants:
        choices = ", ".join(sorted(spec.variants))
        raise DataError(f"{corpus} has no variant {variant!r}; choose from {choices}")
    var = spec.variants[variant]
    for lang in (src, tgt):
        if lang not in var.languages:
            choices = ", ".join(var.languages)
            raise DataError(f"{corpus} ({variant}) has no language {lang!r}; choose from {choices}")
    if src == tgt:
        raise DataError(f"source and target language are both {src!r}")
    return spec, var


def _local_files(
    spec: Corpus, var: Variant, src: str, tgt: str, data_dir: Path
) -> dict[str, tuple[Path, Path]]:
    files = {}
    for split, upstream in spec.splits.items():
        pair = [data_dir / var.local.format(split=upstream, lang=lang) for lang in (src, tgt)]
        missing = [str(path) for path in pair if not path.is_file()]
        if missing and split in spec.optional_local:
            logger.info("%s: no local %s split (%s); leaving it out", spec.name, split, missing[0])
            continue
        if missing:
            raise DataError(f"{missing[0]}: file not found (the {split} split of {spec.name})")
        files[split] = (pair[0], pair[1])
    return files


def _default_cache() -> Path:
    return Path(os.environ.get("TRANSDUCE_CACHE") or Path.home() / ".cache" / "transduce")


def _fetch(url: str, folder: Path, n_lines: int) -> Path:
    """Download `url` into `folder` unless a copy that passes the checks is already there."""
    path = folder / url.rsplit("/", 1)[-1]
    if path.is_file():
        try:
            _verify(path, n_lines)
            return path
        except DataError as error:
            logger.warning("cached copy is bad, downloading again: %s", error)
    folder.mkdir(parents=True, exist_ok=True)
    # a temporary name and a rename, so an interrupted download never looks like a finished one
    handle, tmp_name = tempfile.mkstemp(dir=folder, prefix=".part-", suffix="-" + path.name)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(handle, "wb") as out:
            logger.info("downloading %s", url)
            _copy_url(url, out)
        _verify(tmp, n_lines, shown=url)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _copy_url(url: str, out: BinaryIO) -> None:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            while chunk := response.read(1 << 20):
                out.write(chunk)
    except (urllib.error.URLError, OSError) as error:
        raise DataError(f"{url}: download failed ({error})") from error


def _verify(path: Path, n_lines: int, shown: str | None = None) -> None:
    try:
        got = len(read_lines(path, gzipped=path.name.endswith(".gz")))
    except DataError as error:
        # name the URL rather than the temporary file it was saved to
        raise DataError(str(error).replace(str(path), shown or str(path))) from error
    if got != n_lines:
        raise DataError(f"{shown or path}: expected {n_lines} lines, got {got}")


# --- reading --------------------------------------------------------------------------------


@dataclass
class ParallelText:
    src: list[str]
    tgt: list[str]

    def __len__(self) -> int:
        return len(self.src)


def read_lines(path: Path | str, *, gzipped: bool | None = None) -> list[str]:
    """The lines of a UTF-8 text file, gzipped or not, with only the newline stripped.

    `gzipped=None` decides by the `.gz` suffix. Invalid UTF-8 raises `DataError("FILE line N:
    invalid UTF-8")`; a broken gzip stream raises `DataError` naming the file.
    """
    path = Path(path)
    gzipped = path.suffix == ".gz" if gzipped is None else gzipped
    try:
        raw = path.read_bytes()
    except FileNotFoundError as error:
        raise DataError(f"{path}: file not found") from error
    except OSError as error:  # a folder, no permission
        raise DataError(f"{path}: cannot read ({error.strerror or error})") from error
    try:
        data = gzip.decompress(raw) if gzipped else raw
    except (OSError, EOFError, zlib.error) as error:
        raise DataError(f"{path}: not a readable gzip file ({error})") from error
    return decode_lines(data, str(path))


def decode_lines(data: bytes, name: str) -> list[str]:
    """UTF-8 bytes as lines without their newline; `name` (a file, `<stdin>`) is for errors."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise DataError(f"{name} line {line}: invalid UTF-8") from error
    # split on "\n" alone: str.splitlines would also break at U+2028, \x1c and friends
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def read_parallel(src_path: Path | str, tgt_path: Path | str) -> ParallelText:
    """Both sides of a parallel corpus; they must have the same number of lines."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(
            f"line counts differ: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}"
        )
    return ParallelText(src, tgt)


# --- filtering ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LengthFilter:
    """Which training pairs to keep, in subword tokens per side. Dev and test are never filtered."""

    max_len: int = 250
    max_len_ratio: float = 9.0  # the longer side over the shorter one
    min_len: int = 1  # 1 drops pairs with an empty side

    def __post_init__(self) -> None:
        if not 0 <= self.min_len <= self.max_len:
            raise DataError(f"length filter needs 0 <= min_len <= max_len, got {self}")
        if self.max_len_ratio < 1.0:
            raise DataError(f"length filter max_len_ratio must be >= 1, got {self.max_len_ratio}")


def filter_pairs(
    src: Sequence[Sized], tgt: Sequence[Sized], rule: LengthFilter
) -> tuple[list[int], dict[str, int]]:
    """Indices of the encoded pairs `rule` keeps, and how many were dropped for each reason.

    The report has `kept`, `too_short` (a side under `min_len`: the empty lines at the default),
    `too_long` and `ratio`; each dropped pair counts once, under the first reason that applies.
    """
    report = {"kept": 0, "too_short": 0, "too_long": 0, "ratio": 0}
    kept = []
    for i, (x, y) in enumerate(zip(src, tgt, strict=True)):
        short, long = sorted((len(x), len(y)))
        if short < rule.min_len:
            report["too_short"] += 1
        elif long > rule.max_len:
            report["too_long"] += 1
        elif long > rule.max_len_ratio * max(short, 1):
            report["ratio"] += 1
        else:
            kept.append(i)
    report["kept"] = len(kept)
    return kept, report
