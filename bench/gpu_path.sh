#!/usr/bin/env bash
# The GPU path in one call, for a machine with one GPU (docs/gpu.md): the machine's description,
# then bench/gpu_probe.py. Writes under $OUT (default: a new temp dir): env.txt, console.log,
# gpu_probe.json, logs.tgz. PROBE_BUDGET_S bounds the probe (default 270 s); PROBE_ONLY=a,b runs only
# those cases (the keys of gpu_probe.json).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d /tmp/gpu-path-XXXXXX)}
PY=${PYTHON:-python3}
BUDGET=${PROBE_BUDGET_S:-270}
{
  date -u +%FT%TZ; uname -r; nproc
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  "$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  "$PY" -c 'import yaml, numpy; print("pyyaml", yaml.__version__, "numpy", numpy.__version__)'
  # what the trainer needs beyond these: boto3 for the S3 tier only; the rest is the harness's
  "$PY" -c 'import importlib.util as u; print("importable:", {m: u.find_spec(m) is not None for m in ("boto3", "pydantic", "typer", "rich", "docker", "etcd3")})'
  df -h /dev/shm /tmp 2>&1
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
PYTHONUNBUFFERED=1 timeout -k 5 $((BUDGET + 20)) "$PY" bench/gpu_probe.py --out "$OUT" --budget "$BUDGET" --only "${PROBE_ONLY:-}" 2>&1 | tee "$OUT/console.log"
echo "gpu_path: probe exit ${PIPESTATUS[0]}; results in $OUT"
