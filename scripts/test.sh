#!/usr/bin/env bash
# The test command: set-up, then unit + integration + docker tests, then the chaos suite
# (the end-to-end CLI tests and every scenario of the library) on a real cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python
py=.venv/bin/python
t0=$(date +%s)
# unit tests need nothing; integration tests start real torchrun/etcd/S3/proxy; docker tests a cluster.
# Multi-process tests on a shared 2-core machine are timing-sensitive: a failure gets one rerun, and
# the summary (-rR) names every rerun, so a flaky test is visible rather than hidden.
$py -m pytest -m "not chaos" -n 2 --timeout=900 --reruns 1 -rR -p no:cacheprovider "$@"
t1=$(date +%s)
# one scenario at a time: recovery bounds are measured, and 2 cores shared by two clusters skew them
$py -m pytest -m chaos tests scenarios --timeout=1500 --reruns 1 -p no:cacheprovider -rxXsR \
    --chaos-report-dir reports --junitxml=reports/chaos-junit.xml "$@"
t2=$(date +%s)
echo "test.sh: tests $((t1 - t0)) s, chaos suite $((t2 - t1)) s"
