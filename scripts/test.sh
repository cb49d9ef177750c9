#!/usr/bin/env bash
# Set up if needed, then run the whole test suite. Tests marked `realdata` read the corpora from
# $TRANSDUCE_DATA, by default ../shared/data when it exists; without it they are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/data-dir.sh
exec .venv/bin/python -m pytest "$@"
