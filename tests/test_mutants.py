"""The catalogue of planted bugs (scripts/mutants.py) stays in step with the code: each entry's
text is in its file once, and its tests exist, so the catalogue can be run at any commit."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENTRIES = json.loads((ROOT / "scripts" / "mutants.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["id"] for entry in ENTRIES])
def test_each_planted_bug_still_has_its_text_and_its_tests(entry):
    code = (ROOT / entry["file"]).read_text(encoding="utf-8")
    assert code.count(entry["old"]) == 1, f"{entry['file']} changed: rewrite this entry"
    assert entry["new"] != entry["old"]
    for test in entry["tests"]:
        assert (ROOT / test.split("::")[0]).is_file(), test


def test_the_ids_are_unique():
    ids = [entry["id"] for entry in ENTRIES]
    assert len(ids) == len(set(ids))
