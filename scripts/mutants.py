"""Plant known bugs in a copy of the code, one at a time, and check that the tests notice each.

A test that cannot fail is a defect; this is how we look for them. Each entry of mutants.json is
one plausible slip (a mask off by one, a scale by sqrt(d_model) instead of sqrt(d_k), a setting
not passed on) written as an exact text replacement in one file, with the test files that should
catch it. The copy is a clone of the committed tree (uncommitted changes are not in it), so the
working tree is never touched. An entry whose text the code no longer has is reported stale:
rewrite it against the new code.

    .venv/bin/python scripts/mutants.py                 # every entry (about a minute for ten)
    .venv/bin/python scripts/mutants.py --only t3-A2 align-layer-last

Exits 1 when a mutant survives or an entry is stale, so it can gate a change by hand. Not in the
test command: the whole catalogue takes longer than the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = Path(__file__).with_name("mutants.json")
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--catalogue", type=Path, default=CATALOGUE)
    parser.add_argument("--only", nargs="*", help="the ids of the entries to plant")
    args = parser.parse_args()
    entries = json.loads(args.catalogue.read_text(encoding="utf-8"))
    if args.only:
        entries = [entry for entry in entries if entry["id"] in args.only]
    with tempfile.TemporaryDirectory(prefix="transduce-mutants-") as folder:
        copy = Path(folder) / "copy"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(copy)], check=True)
        verdicts = [plant(copy, entry) for entry in entries]
    survivors = [v for v in verdicts if v != "killed"]
    print(f"{len(verdicts) - len(survivors)} of {len(verdicts)} killed")
    return 1 if survivors else 0


def plant(copy: Path, entry: dict) -> str:
    """Apply one entry, run its tests in the copy, put the file back; "killed", "survived" or
    "stale"."""
    path = copy / entry["file"]
    original = path.read_text(encoding="utf-8")
    if original.count(entry["old"]) != 1:
        print(f"stale     {entry['id']}: its text occurs {original.count(entry['old'])} times")
        return "stale"
    path.write_text(original.replace(entry["old"], entry["new"]), encoding="utf-8")
    try:
        outcome = subprocess.run(
            [*PYTEST, "-m", entry.get("marker", "not slow"), *entry["tests"]],
            cwd=copy,
            env=os.environ | {"PYTHONPATH": str(copy)},  # the copy's package, not the checkout's
            capture_output=True,
            text=True,
        )
    finally:
        path.write_text(original, encoding="utf-8")
    lines = outcome.stdout.splitlines()
    failed = next((line for line in lines if line.startswith(("FAILED", "ERROR"))), "")
    verdict = "killed" if outcome.returncode != 0 else "survived"
    print(f"{verdict:9} {entry['id']}: {failed or (lines[-1] if lines else '')}", flush=True)
    return verdict


if __name__ == "__main__":
    sys.exit(main())
