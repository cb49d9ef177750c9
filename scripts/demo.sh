#!/usr/bin/env bash
# Set up if needed, then run the main job: prepare Multi30k en-de, train the tiny preset for a
# bounded time (--minutes, default 10), translate the 2016 test set, print BLEU, plot the curve.
# Reads the corpora from $TRANSDUCE_DATA, or ../shared/data when it exists, else downloads them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/data-dir.sh
exec .venv/bin/transduce demo "$@"
