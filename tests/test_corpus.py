"""Reading, checking, filtering and fetching parallel corpora (corpus.py)."""

from __future__ import annotations

import functools
import gzip
import http.server
import os
import threading
from pathlib import Path
from typing import ClassVar

import pytest

from transduce.data import corpus
from transduce.data.corpus import (
    CORPORA,
    Corpus,
    DataError,
    LengthFilter,
    Variant,
    corpus_files,
    filter_pairs,
    read_lines,
    read_parallel,
)


def write_gz(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress("".join(f"{line}\n" for line in lines).encode()))
    return path


# --- reading --------------------------------------------------------------------------------


def test_read_lines_plain_and_gzip_strip_only_the_newline(tmp_path):
    lines = ["  two  spaces ", "", "tab\there", "ünïcödé \u2028 kept", "last\r"]
    plain = tmp_path / "a.txt"
    plain.write_bytes("\n".join(lines).encode())  # no newline after the last line
    assert read_lines(plain) == lines
    assert read_lines(write_gz(tmp_path / "a.gz", lines)) == lines


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.de"
    path.write_bytes(b"gut\nauch gut\nschlecht \xff\xfe\n")
    with pytest.raises(DataError, match=rf"{path} line 3: invalid UTF-8"):
        read_lines(path)
    gz = tmp_path / "bad.de.gz"
    gz.write_bytes(gzip.compress(b"\xc3\n"))
    with pytest.raises(DataError, match=r"bad\.de\.gz line 1: invalid UTF-8"):
        read_lines(gz)


def test_broken_gzip_names_the_file(tmp_path):
    path = tmp_path / "cut.en.gz"
    path.write_bytes(gzip.compress(b"x\n" * 1000)[:-20])
    with pytest.raises(DataError, match=r"cut\.en\.gz: not a readable gzip"):
        read_lines(path)


def test_a_folder_given_as_a_text_file_is_named_as_unreadable_not_as_gzip(tmp_path):
    (tmp_path / "data.en").mkdir()
    with pytest.raises(DataError, match=r"data\.en: cannot read \(Is a directory\)"):
        read_lines(tmp_path / "data.en")


def test_read_parallel_mismatch_names_both_files_and_counts(tmp_path):
    src = write_gz(tmp_path / "train.en.gz", ["a", "b", "c"])
    tgt = write_gz(tmp_path / "train.de.gz", ["a", "b"])
    with pytest.raises(DataError) as error:
        read_parallel(src, tgt)
    message = str(error.value)
    assert str(src) in message and str(tgt) in message
    assert "3" in message and "2" in message
    text = read_parallel(src, src)
    assert text.src == text.tgt == ["a", "b", "c"] and len(text) == 3


# --- filtering ------------------------------------------------------------------------------


def test_filter_drops_empty_long_and_unbalanced_pairs_and_counts_them():
    rule = LengthFilter(max_len=10, max_len_ratio=3.0, min_len=1)
    pairs = [
        ([1, 2], [3, 4, 5]),  # kept
        ([], [1]),  # empty source
        ([1], []),  # empty target
        ([1] * 11, [1] * 10),  # too long
        ([1], [1] * 4),  # ratio 4 > 3
        ([1] * 10, [1] * 10),  # at the limits: kept
        ([1] * 3, [1]),  # ratio exactly 3: kept
    ]
    kept, report = filter_pairs([p[0] for p in pairs], [p[1] for p in pairs], rule)
    assert kept == [0, 5, 6]
    assert report == {"kept": 3, "too_short": 2, "too_long": 1, "ratio": 1}


def test_with_empty_sides_allowed_the_ratio_counts_an_empty_side_as_one_token():
    """min_len=0 keeps a pair with an empty side (an untranslated caption, say) when its other
    side is within the ratio of one token; it is not dropped as infinitely unbalanced."""
    rule = LengthFilter(max_len=10, max_len_ratio=3.0, min_len=0)
    kept, report = filter_pairs([[], [], [1] * 4], [[1] * 3, [1] * 4, []], rule)
    assert kept == [0]
    assert report == {"kept": 1, "too_short": 0, "too_long": 0, "ratio": 2}


def test_filter_rejects_nonsense_rules():
    with pytest.raises(DataError):
        LengthFilter(max_len=3, min_len=5)
    with pytest.raises(DataError):
        LengthFilter(max_len_ratio=0.5)


# --- named corpora, local ---------------------------------------------------------------------


def test_local_layout_and_optional_test_split(tmp_path):
    for split in ("train", "dev"):
        for lang in ("en", "ja"):
            write_gz(tmp_path / "small_parallel_enja" / f"{split}.{lang}.gz", ["x"])
    files = corpus_files("small_parallel_enja", "en", "ja", data_dir=tmp_path)
    assert set(files) == {"train", "dev"}  # no local test: fine, just absent
    assert files["dev"] == (
        tmp_path / "small_parallel_enja/dev.en.gz",
        tmp_path / "small_parallel_enja/dev.ja.gz",
    )
    for lang in ("en", "de"):
        write_gz(tmp_path / "multi30k" / f"train.{lang}.gz", ["x"])
    with pytest.raises(DataError, match=r"multi30k/val\.en\.gz: file not found"):
        corpus_files("multi30k", "en", "de", data_dir=tmp_path)  # dev is required for multi30k


@pytest.mark.parametrize(
    "args, words",
    [
        (("wmt99", "en", "de"), ["multi30k", "small_parallel_enja"]),
        (("multi30k", "en", "xx"), ["'xx'", "en, de, fr, cs"]),
        (("multi30k", "cs", "en", "tok"), ["'cs'", "en, de, fr"]),
        (("multi30k", "en", "de", "bpe"), ["'bpe'", "raw, tok"]),
        (("multi30k", "en", "en"), ["both"]),
    ],
)
def test_unknown_names_list_the_choices(tmp_path, args, words):
    name, src, tgt, *variant = args
    with pytest.raises(DataError) as error:
        corpus_files(name, src, tgt, variant=(variant or ["raw"])[0], data_dir=tmp_path)
    for word in words:
        assert word in str(error.value)


# --- named corpora, downloaded ----------------------------------------------------------------


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    requests: ClassVar[list[str]] = []

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        QuietHandler.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    """An HTTP server on 127.0.0.1 serving `tmp_path / "www"`; yields (folder, base URL)."""
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(QuietHandler, directory=str(www))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    QuietHandler.requests = []
    yield www, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def toy_corpus(monkeypatch, server):
    """A corpus like multi30k, but its URL template points at the local server."""
    www, base = server
    spec = Corpus(
        name="toy",
        splits={"train": "train", "dev": "val", "test": "test_2016"},
        lines={"train": 4, "dev": 2, "test": 2},
        variants={
            "raw": Variant(base + "/{split}.{lang}.gz", "toy/{split}.{lang}.gz", ("en", "de"))
        },
    )
    monkeypatch.setitem(CORPORA, "toy", spec)
    for split, upstream in spec.splits.items():
        for lang in ("en", "de"):
            write_gz(
                www / f"{upstream}.{lang}.gz", [f"{lang} {i}" for i in range(spec.lines[split])]
            )
    return www


def test_download_verifies_and_reuses_the_cache(tmp_path, toy_corpus):
    cache = tmp_path / "cache"
    files = corpus_files("toy", "en", "de", cache_dir=cache)
    assert set(files) == {"train", "dev", "test"}
    assert read_lines(files["dev"][1]) == ["de 0", "de 1"]
    assert files["test"][0] == cache / "toy" / "raw" / "test_2016.en.gz"
    assert len(QuietHandler.requests) == 6
    assert not [p for p in cache.rglob("*") if p.name.startswith(".part-")]
    again = corpus_files("toy", "en", "de", cache_dir=cache)
    assert again == files and len(QuietHandler.requests) == 6  # nothing fetched twice


def test_default_cache_is_the_environment_variable(tmp_path, toy_corpus, monkeypatch):
    monkeypatch.setenv("TRANSDUCE_CACHE", str(tmp_path / "env_cache"))
    files = corpus_files("toy", "en", "de")
    assert files["train"][0].is_relative_to(tmp_path / "env_cache")


def test_truncated_download_is_rejected_and_not_kept(tmp_path, toy_corpus):
    good = (toy_corpus / "val.de.gz").read_bytes()
    (toy_corpus / "val.de.gz").write_bytes(good[: len(good) // 2])
    cache = tmp_path / "cache"
    with pytest.raises(
        DataError, match=r"http://127\.0\.0\.1:\d+/val\.de\.gz: not a readable gzip"
    ):
        corpus_files("toy", "en", "de", cache_dir=cache)
    assert not (cache / "toy" / "raw" / "val.de.gz").exists()
    assert not [p for p in cache.rglob("*") if p.name.startswith(".part-")]


def test_download_with_wrong_line_count_or_missing_file_is_rejected(tmp_path, toy_corpus):
    write_gz(toy_corpus / "train.en.gz", ["only", "three", "lines"])
    with pytest.raises(DataError, match=r"train\.en\.gz: expected 4 lines, got 3"):
        corpus_files("toy", "en", "de", cache_dir=tmp_path / "cache")
    write_gz(toy_corpus / "train.en.gz", ["one", "too", "many", "lines", "here"])
    with pytest.raises(DataError, match=r"train\.en\.gz: expected 4 lines, got 5"):
        corpus_files("toy", "en", "de", cache_dir=tmp_path / "cache")
    (toy_corpus / "train.en.gz").unlink()
    with pytest.raises(DataError, match=r"train\.en\.gz: download failed"):
        corpus_files("toy", "en", "de", cache_dir=tmp_path / "cache")


def test_bad_cached_copy_is_downloaded_again(tmp_path, toy_corpus):
    cache = tmp_path / "cache"
    files = corpus_files("toy", "en", "de", cache_dir=cache)
    files["train"][1].write_bytes(b"garbage")
    corpus_files("toy", "en", "de", cache_dir=cache)
    assert read_lines(files["train"][1]) == [f"de {i}" for i in range(4)]


def test_known_corpora_point_at_their_public_sources():
    raw = CORPORA["multi30k"].variants["raw"].url.format(split="val", lang="de")
    assert (
        raw == "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/val.de.gz"
    )
    enja = CORPORA["small_parallel_enja"].variants["raw"].url.format(split="test", lang="ja")
    assert enja == "https://raw.githubusercontent.com/odashi/small_parallel_enja/master/test.ja"


# --- the real data ------------------------------------------------------------------------------


@pytest.mark.realdata
@pytest.mark.skipif("TRANSDUCE_DATA" not in os.environ, reason="set TRANSDUCE_DATA to the data dir")
def test_real_corpora_have_the_expected_line_counts():
    data_dir = Path(os.environ["TRANSDUCE_DATA"])
    cases = [
        ("multi30k", "en", "de", "raw"),
        ("multi30k", "cs", "fr", "raw"),
        ("multi30k", "en", "fr", "tok"),
        ("small_parallel_enja", "en", "ja", "raw"),
    ]
    for name, src, tgt, variant in cases:
        files = corpus_files(name, src, tgt, variant=variant, data_dir=data_dir)
        assert {"train", "dev"} <= set(files)
        for split, (src_path, tgt_path) in files.items():
            assert len(read_parallel(src_path, tgt_path)) == corpus.CORPORA[name].lines[split]


def test_multi30k_local_splits_are_the_2016_flickr_test_and_val_of_each_variant(tmp_path):
    # guards: a named split resolving to the wrong upstream file (val, test_2016_flickr, tok/)
    expected = {
        "raw": "multi30k/{split}.{lang}.gz",
        "tok": "multi30k/tok/{split}.lc.norm.tok.{lang}.gz",
    }
    upstream = {"train": "train", "dev": "val", "test": "test_2016_flickr"}
    for variant, layout in expected.items():
        for name in upstream.values():
            for lang in ("en", "de"):
                write_gz(tmp_path / layout.format(split=name, lang=lang), [name])
        files = corpus_files("multi30k", "de", "en", variant=variant, data_dir=tmp_path)
        assert files == {
            split: tuple(tmp_path / layout.format(split=name, lang=lang) for lang in ("de", "en"))
            for split, name in upstream.items()
        }, variant


def test_the_named_corpora_know_their_line_counts_and_which_text_is_tokenized():
    # guards: a download checked against the wrong count, or tokenized text scored as raw
    assert dict(CORPORA["multi30k"].lines) == {"train": 29000, "dev": 1014, "test": 1000}
    assert dict(CORPORA["small_parallel_enja"].lines) == {"train": 50000, "dev": 500, "test": 500}
    tok = CORPORA["multi30k"].variants["tok"].url.format(split="test_2016_flickr", lang="fr")
    assert tok == (
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/tok/"
        "test_2016_flickr.lc.norm.tok.fr.gz"
    )
    assert corpus.is_tokenized("multi30k", "tok") and corpus.is_tokenized("small_parallel_enja")
    assert not corpus.is_tokenized("multi30k", "raw") and not corpus.is_tokenized("files")
