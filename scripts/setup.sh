#!/usr/bin/env bash
# Create .venv and install transduce with its test tools, from this repository's own files.
# Idempotent: a second run only checks. TORCH_SPEC picks the PyTorch build: the default pin is the
# CPU build this project's machines carry; users with a GPU may set e.g. TORCH_SPEC='torch>=2.3'.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "transduce needs Python 3.11 or newer (found $("$python" --version))" >&2; exit 1; }
[ -x .venv/bin/python ] || "$python" -m venv .venv
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  .venv/bin/python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
fi
.venv/bin/python -m pip install -q -e '.[dev]'
