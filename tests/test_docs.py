"""The guided tour (docs/tour.md and its Japanese translation) cannot go stale: its python blocks
run in order, its explain output is what `explain` prints now, and its figures exist; README's
table of the server's limits gives their defaults."""

import re
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
TOURS = [DOCS / "tour.md", DOCS / "tour.ja.md"]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.parametrize("tour", TOURS, ids=lambda p: p.name)
def test_the_tours_python_blocks_run_in_order(tour, tmp_path, monkeypatch, capsys):
    blocks = python_blocks(tour.read_text(encoding="utf-8"))
    assert len(blocks) >= 8
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "tour"}
    for number, block in enumerate(blocks, start=1):
        code = compile(block, f"{tour.name}, python block {number}", "exec")
        exec(code, namespace)
    assert "AER = 0.40" in capsys.readouterr().out


@pytest.mark.parametrize("tour", TOURS, ids=lambda p: p.name)
def test_the_tours_explain_output_is_what_explain_prints_now(tour, monkeypatch):
    monkeypatch.syspath_prepend(str(DOCS))
    sys.modules.pop("make_tour_assets", None)
    from make_tour_assets import EXPLAIN_MARKERS, explain_block

    text = tour.read_text(encoding="utf-8")
    begin, end = EXPLAIN_MARKERS
    shown = text.split(begin, 1)[1].split(end, 1)[0].strip()
    _assert_same_up_to_rounding(shown, explain_block())


DECIMAL = re.compile(r"-?\d+\.(\d+)")


def _assert_same_up_to_rounding(shown: str, now: str) -> None:
    """The same text, and each printed decimal within one unit of its last digit: the float32
    products differ in their last bits between CPUs (-1.5557 on one host, -1.5556 on another)."""
    hint = "run: python docs/make_tour_assets.py"
    assert DECIMAL.sub("#", shown) == DECIMAL.sub("#", now), hint
    for old, new in zip(DECIMAL.finditer(shown), DECIMAL.finditer(now), strict=True):
        unit = 10.0 ** -len(old.group(1))
        assert abs(float(old.group()) - float(new.group())) <= 1.01 * unit, (old.group(), hint)


@pytest.mark.parametrize("tour", TOURS, ids=lambda p: p.name)
def test_the_tours_figures_and_links_exist(tour):
    text = tour.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)\)", text)
    assert any(t.endswith(".png") for t in targets)
    assert [t for t in targets if not (DOCS / t).exists()] == []


def test_both_tours_run_the_same_code():
    english, japanese = (python_blocks(t.read_text(encoding="utf-8")) for t in TOURS)
    assert len(english) == len(japanese)


def test_the_readmes_serving_defaults_are_the_servers_own():
    """README's table of the server's limits gives each setting's default; the server listens on
    loopback alone unless told otherwise."""
    from dataclasses import fields

    from transduce.serve.settings import ServeSettings

    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("**Limits and bad input.**") : readme.index("**The page.**")]
    defaults = ServeSettings()
    stated = {name: float(value) for name, value in re.findall(r"`(\w+)` \((\d+)", section)}
    assert set(stated) == {f.name for f in fields(defaults)} - {"host", "port"}
    assert stated == {name: getattr(defaults, name) for name in stated}
    assert (defaults.host, defaults.port) == ("127.0.0.1", 8000)
    assert "[--host 127.0.0.1] [--port 8000]" in readme


def test_every_python_name_the_readme_gives_is_reachable_as_written():
    """A dotted name the README calls (`transduce.x.y(`) must be reachable after `import
    transduce` alone, and each `from transduce... import name` must import: a reader pastes
    them as they stand (`transduce.viz.views.attention_views` was not, without its import)."""
    import importlib
    import subprocess

    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    called = sorted(set(re.findall(r"\b(transduce(?:\.\w+)+)\(", readme)))
    imported = sorted(set(re.findall(r"from (transduce[\w.]*) import (\w+)", readme)))
    assert len(called) > 10 and imported
    for module, name in imported:
        assert hasattr(importlib.import_module(module), name), f"from {module} import {name}"
    # in a fresh interpreter: this one has imported every submodule the tests use
    check = "import transduce\n" + "".join(f"{name}\n" for name in called)
    fresh = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert fresh.returncode == 0, fresh.stderr.strip().splitlines()[-1]
