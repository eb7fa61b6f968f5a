#!/usr/bin/env bash
# The main job: set-up, then one real scenario end to end (a node is killed; training must recover
# from the memory tier). Report lands in reports/<run-id>/report.html. Set-up says how long it took
# (the run's own duration is in its summary): the fresh-machine row of docs/harness-speed.md.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
bash scripts/setup.sh
echo "demo: set-up took $(( $(date +%s) - t0 )) s"
exec .venv/bin/chaosbench run scenarios/node_loss.yaml "$@"
