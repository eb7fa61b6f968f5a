"""The compose GPU override, checked where no docker runs it: render a 2-node cluster's compose file
plus docker-compose.gpu.yml exactly as the docker backend writes them (ComposePlan gpus=True), then
let docker-compose merge and validate both (`config` needs no daemon and no GPU).

    python bench/gpu_compose_check.py [--nodes 2] [--compose docker-compose]

Prints the merged GPU-related settings of every node and exits non-zero if compose rejects the pair.
What this cannot show: that the nvidia runtime grants the reservation, or NCCL inside containers.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.docker.compose_file import ComposePlan, dump, render, render_gpu_override


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--compose", default="docker-compose", help="compose command (e.g. 'docker compose')")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpu-compose-"))
    nodes = [f"node-{i}" for i in range(a.nodes)]
    spec = ClusterSpec(run_id="gpucheck", run_dir=tmp, nodes=a.nodes)
    plan = ComposePlan(project="cbgpucheck", image="chaosbench/node:check", subnet=ipaddress.ip_network("10.222.9.0/24"),
                       owner="check:1:1", events_host_dir=str(tmp / "events"), gpus=True,
                       control_host_dir=str(tmp / "control"), ready_host_dir=str(tmp / "ready"))
    main_file, gpu_file = tmp / "docker-compose.yml", tmp / "docker-compose.gpu.yml"
    main_file.write_text(dump(render(plan, spec, nodes)))
    gpu_file.write_text(dump(render_gpu_override(plan, nodes)))
    cmd = [*a.compose.split(), "-p", plan.project, "-f", str(main_file), "-f", str(gpu_file), "config"]
    if shutil.which(cmd[0]) is None:
        print(f"{cmd[0]}: not installed; the files are in {tmp}", file=sys.stderr)
        return 2
    p = subprocess.run(cmd, capture_output=True, text=True)
    print("$", " ".join(cmd), "->", p.returncode)
    if p.returncode != 0:
        print(p.stderr.strip())
        return 1
    merged = yaml.safe_load(p.stdout)["services"]
    out = {n: {"deploy": merged[n].get("deploy"),
               "environment": {k: v for k, v in (merged[n].get("environment") or {}).items()
                               if k.startswith(("NCCL", "CUDA"))},
               "shm_size": merged[n].get("shm_size")} for n in nodes}
    print(json.dumps(out, indent=1))
    if p.stderr.strip():
        print("compose warnings:", p.stderr.strip())
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
