#!/usr/bin/env bash
# The test command: set-up, then unit + integration tests, then the chaos scenario library.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python
.venv/bin/python -m pytest -m "not chaos" -n 2 "$@"
.venv/bin/python -m pytest -m chaos "$@"
