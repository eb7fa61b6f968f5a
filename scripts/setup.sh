#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: system packages, the project virtualenv and, where a docker
# daemon runs, the cluster images (built locally, no registry needed). Safe to run again: it only
# does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=()
command -v etcd >/dev/null        || need+=(etcd-server etcd-client)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v chromium >/dev/null    || need+=(chromium)
command -v iptables >/dev/null    || need+=(iptables)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${need[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=".venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing python dependencies into .venv (pip cache makes re-runs fast)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[dev]'
  rm -f .venv/.installed-*; touch "$stamp"
fi

if [ "${CHAOSBENCH_SKIP_IMAGES:-0}" != 1 ] && command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  .venv/bin/python -m chaosbench.cluster.images build
  # the Slurm test cluster's image (tests/slurm) only for the test command (`setup.sh --slurm`):
  # the main job does not use it. Built here rather than inside a test's time limit.
  if [ "${1:-}" = "--slurm" ]; then
    .venv/bin/python -m chaosbench.cluster.slurm.testcluster build
  fi
fi
