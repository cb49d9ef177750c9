#!/usr/bin/env bash
# Set up if needed, then run the whole test suite. Tests marked `realdata` read the corpora from
# $TRANSDUCE_DATA, by default ../shared/data when it exists; without it they are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/data-dir.sh
# Lint first: a style slip fails in a second, not after the suite (rules: pyproject.toml).
.venv/bin/ruff check --quiet transduce tests benchmarks docs
.venv/bin/ruff format --check --quiet .
exec .venv/bin/python -m pytest "$@"
