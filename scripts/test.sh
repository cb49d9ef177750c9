#!/usr/bin/env bash
# Set up if needed, then run the whole test suite. Tests marked `realdata` read the corpora from
# $TRANSDUCE_DATA, by default ../shared/data when it exists; without it they are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ -z "${TRANSDUCE_DATA:-}" ] && [ -d ../shared/data ]; then
  TRANSDUCE_DATA=$(cd ../shared/data && pwd)
  export TRANSDUCE_DATA
fi
exec .venv/bin/python -m pytest "$@"
