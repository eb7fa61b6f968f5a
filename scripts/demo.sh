#!/usr/bin/env bash
# The main job: set-up, then one real scenario end to end (a node is killed; training must recover
# from the memory tier). Report lands in reports/<run-id>/report.html.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/chaosbench run scenarios/node_loss.yaml "$@"
