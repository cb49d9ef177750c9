"""`transduce translate` group by group (`--buffer-size`, and line by line at a terminal): each
group written as soon as it is translated, with what the whole file at once gives."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from transduce.cli import main
from transduce.decoding.translate import Translator

from .conftest import save_toy_model, write_lines

LINES = ["the dog runs", "green grass", "children playing outside", "the dog", "grass"]
COMMAND = [sys.executable, "-m", "transduce", "--quiet", "translate"]
# Standard output into a pipe is block-buffered unless the process flushes: not hidden here by a
# PYTHONUNBUFFERED that the shell running the tests may set.
BUFFERED = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return save_toy_model(tmp_path_factory.mktemp("stream"))


def _offline(model: Path, lines: list[str]) -> list[str]:
    return [hyps[0][0] for hyps in Translator.load(model).translate(lines)]


def _line_within(stream, seconds: float = 60) -> str:
    """One line the process writes, waiting at most `seconds` (its start imports torch)."""
    ready, _, _ = select.select([stream], [], [], seconds)
    assert ready, "no translation came while the process waited for more input"
    return stream.readline().decode("utf-8").rstrip("\n")


def test_a_pipe_fed_line_by_line_gets_each_translation_before_sending_the_next(model):
    """--buffer-size 1: a program writes a line, waits for its translation, writes the next;
    with the whole input read first it would wait for ever."""
    expected = _offline(model, LINES[:3])
    command = [*COMMAND, "--model", str(model), "--buffer-size", "1"]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    process = subprocess.Popen(command, **pipes, env=BUFFERED)
    try:
        for line, translation in zip(LINES[:3], expected, strict=True):
            process.stdin.write(line.encode() + b"\n")
            process.stdin.flush()
            assert _line_within(process.stdout) == translation
        process.stdin.close()
        assert process.wait(60) == 0
    finally:
        process.kill()


def test_at_a_terminal_each_line_is_translated_as_it_is_entered(model):
    """Typed at a terminal (a pseudo-terminal here), no flag needed: a line, Enter, its
    translation; Ctrl-D ends. What to do is said on standard error."""
    expected = _offline(model, LINES[:2])
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [*COMMAND[:3], "translate", "--model", str(model)],
        stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=BUFFERED,
    )  # fmt: skip
    os.close(terminal)
    try:
        for line, translation in zip(LINES[:2], expected, strict=True):
            os.write(controller, line.encode() + b"\n")
            assert _line_within(process.stdout) == translation
        os.write(controller, b"\x04")  # Ctrl-D at the start of a line: the end of the input
        assert process.wait(60) == 0
        assert "Ctrl-D ends" in process.stderr.read().decode()
    finally:
        process.kill()
        os.close(controller)


@pytest.mark.parametrize("extra", [[], ["--n-best", "2", "--beam", "2"], ["--alignments"]])
def test_groups_write_what_the_whole_file_gives(model, tmp_path, extra):
    """Groups of 2 of a file of 5 lines: the same lines as at once (n-best lines numbered
    through the file, not per group), prefixes taken group by group."""
    source = write_lines(tmp_path / "in.txt", LINES)
    prefix = write_lines(tmp_path / "prefix.txt", ["the gr", "", "chi", "", "dog "])
    base = ["translate", "--model", str(model), "--input", str(source), "--prefix", str(prefix),
            *extra]  # fmt: skip
    main([*base, "--output", str(tmp_path / "whole.txt")])
    main([*base, "--buffer-size", "2", "--output", str(tmp_path / "groups.txt")])
    whole = (tmp_path / "whole.txt").read_text(encoding="utf-8")
    assert (tmp_path / "groups.txt").read_text(encoding="utf-8") == whole
    if extra[:1] == ["--n-best"]:
        assert [line.split(" ||| ")[0] for line in whole.splitlines()] == [
            str(i) for i in range(5) for _ in range(2)
        ]


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_a_stream_keeps_what_was_translated_before_a_bad_line(model, monkeypatch, capsys):
    """Invalid UTF-8 on line 3 of a stream: named by its line number, the first two lines'
    translations already written."""
    _stdin(monkeypatch, b"the dog runs\ngreen grass\n\xff\xfe dog\nthe dog\n")
    with pytest.raises(SystemExit, match="<stdin> line 3: invalid UTF-8"):
        main(["translate", "--model", str(model), "--buffer-size", "1"])
    assert capsys.readouterr().out.splitlines() == _offline(model, LINES[:2])


def test_prefixes_must_match_a_streams_lines(model, tmp_path, monkeypatch):
    prefix = write_lines(tmp_path / "prefix.txt", ["the", "green"])
    command = ["translate", "--model", str(model), "--buffer-size", "1", "--prefix", str(prefix)]
    _stdin(monkeypatch, b"the dog\ngrass\ndog\n")
    with pytest.raises(SystemExit, match="has 2 lines, the input 3 or more"):
        main(command)
    _stdin(monkeypatch, b"the dog\n")
    with pytest.raises(SystemExit, match="has 2 lines, the input 1:"):
        main(command)


def test_samples_drawn_group_by_group_are_reproducible_and_not_repeated(model, monkeypatch, capsys):
    """Each group draws from its own stream (the seed plus its first line's number): the same
    sentence in two groups gets other samples, and the same run draws the same again."""
    command = ["translate", "--model", str(model), "--buffer-size", "1", "--sampling",
               "--n-best", "4", "--seed", "5"]  # fmt: skip

    def samples() -> list[list[str]]:
        _stdin(monkeypatch, b"the dog runs\nthe dog runs\n")
        main(command)
        lines = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
        return [[text for i, text, _ in lines if i == str(n)] for n in range(2)]

    first, second = samples()
    assert len(first) == len(second) == 4 and first != second
    assert samples() == [first, second]


def test_an_empty_input_writes_an_empty_file(model, tmp_path, monkeypatch):
    _stdin(monkeypatch, b"")
    out = tmp_path / "out.txt"
    main(["translate", "--model", str(model), "--buffer-size", "1", "--output", str(out)])
    assert out.read_text(encoding="utf-8") == ""
    with pytest.raises(SystemExit, match="--buffer-size 0: translate at least 1 line"):
        main(["translate", "--model", str(model), "--buffer-size", "0"])


def test_a_files_prefix_count_is_checked_before_any_group_and_crlf_is_no_space(model, tmp_path):
    """With --input and --buffer-size, a --prefix file of another length is refused before
    anything is written; a prefix file with Windows line ends reads as the same file without."""
    source = write_lines(tmp_path / "in.txt", LINES[:3])
    out = tmp_path / "out.txt"
    prefix = write_lines(tmp_path / "prefix.txt", ["the gr", "", "chi", "extra"])
    with pytest.raises(SystemExit, match="has 4 lines, the input 3:"):
        main(["translate", "--model", str(model), "--input", str(source), "--buffer-size", "1",
              "--prefix", str(prefix), "--output", str(out)])  # fmt: skip
    assert not out.exists()
    unix, windows = tmp_path / "unix.txt", tmp_path / "windows.txt"
    unix.write_bytes(b"the gr\n\nchi\n")
    windows.write_bytes(b"the gr\r\n\r\nchi\r\n")
    base = ["translate", "--model", str(model), "--input", str(source), "--buffer-size", "2"]
    main([*base, "--prefix", str(unix), "--output", str(tmp_path / "a.txt")])
    main([*base, "--prefix", str(windows), "--output", str(tmp_path / "b.txt")])
    translations = (tmp_path / "a.txt").read_text(encoding="utf-8")
    assert (tmp_path / "b.txt").read_text(encoding="utf-8") == translations
    assert translations.splitlines()[0].startswith("the gr")
