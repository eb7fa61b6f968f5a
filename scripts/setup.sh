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
# chromium (356 MB installed) only for the test command's report browser tests: the main job never runs it
[ "${1:-}" != "--slurm" ] || command -v chromium >/dev/null || need+=(chromium)
command -v iptables >/dev/null    || need+=(iptables)
command -v fusermount3 >/dev/null || need+=(fuse3)          # disk_fault's FUSE layer on the local backend
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || need+=(libfaketime)   # clock_skew, local backend
command -v cc >/dev/null          || need+=(gcc libc6-dev)   # clock_skew builds its libfaketime fix (clockfix.c)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${need[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
fi

images=0
if [ "${CHAOSBENCH_SKIP_IMAGES:-0}" != 1 ] && command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  images=1
  # the base image (debootstrap, network-bound) needs no venv: build it while pip fills .venv
  base_log=$(mktemp -t chaosbench-setup-base.XXXXXX)
  python3 -m chaosbench.cluster.docker.images base > "$base_log" 2>&1 &
  base_pid=$!
  trap 'kill "$base_pid" 2>/dev/null; rm -f "$base_log"' INT TERM
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=".venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setup: installing python dependencies into .venv (pip cache makes re-runs fast)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[dev]'
  rm -f .venv/.installed-*; touch "$stamp"
fi

if [ "$images" = 1 ]; then
  # a failed early base build is not fatal: `build` below retries it and reports its error
  wait "$base_pid" || { echo "setup: the early base image build failed (retrying):"; tail -5 "$base_log"; }
  trap - INT TERM; rm -f "$base_log"
  # the test command's many runs import torch from a volume where docker's storage driver is slow
  # (fuse-overlayfs): a minute of copying, repaid over the suite, not by the main job's one run
  if [ "${1:-}" = "--slurm" ]; then
    .venv/bin/python -m chaosbench.cluster.docker.images build --venv-volume
  else
    .venv/bin/python -m chaosbench.cluster.docker.images build
  fi
  # the Slurm test cluster's image (tests/slurm) only for the test command (`setup.sh --slurm`):
  # the main job does not use it. Built here rather than inside a test's time limit.
  if [ "${1:-}" = "--slurm" ]; then
    .venv/bin/python -m chaosbench.cluster.slurm.testcluster build
    # the wheels of examples/byo_deps' own packages (tests/jobenv), so its tests need no index
    .venv/bin/python -m chaosbench.cluster.jobenv fetch -r examples/byo_deps/requirements.txt
    # the Ray backend's image (the node image + ray[train] in /opt/jobenv) for the Ray chaos tests
    .venv/bin/python -m chaosbench.cluster.ray.testcluster build
    # torchft's job image (the node image + the launcher's pins in /opt/jobenv) for examples/torchft's chaos test
    .venv/bin/python -c 'from chaosbench.cluster import jobenv; from chaosbench.cluster.docker import images
from chaosbench.launchers.torchft import LAUNCHER
print(jobenv.docker_image(images.node_image(), jobenv.requirements(None, None, LAUNCHER.requirements)))'
    # ft_launcher's and dlrover-run's job images (their pins in /opt/jobenv) for examples/{ft_launcher,dlrover}'s chaos tests
    .venv/bin/python -c 'from chaosbench import launchers; from chaosbench.cluster import jobenv
from chaosbench.cluster.docker import images
for name in ("ft_launcher", "dlrover-run"):
    print(jobenv.docker_image(images.node_image(), jobenv.requirements(None, None, launchers.get(name).requirements)))'
  fi
fi
