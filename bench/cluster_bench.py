"""Cluster up-to-first-step and teardown time per backend, measured side by side in one run.

    python bench/cluster_bench.py [--backends local,docker] [--nodes 2] [--repeat 1]

"up" = services healthy and routes created; "first step" = from start_training until every node's
trainer has logged step 1 (rendezvous + process group + model build included); "teardown" = down().
The docker image is built (or reused) before timing starts, so the figures are cluster costs only.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from chaosbench.cluster import ClusterSpec, available_backends, create_cluster


def _first_step_seen(events_dir: Path, nodes: int) -> bool:
    seen = set()
    for f in events_dir.glob("events-*.jsonl"):
        for line in f.read_text(errors="replace").splitlines():
            if '"event": "step"' in line or '"event":"step"' in line:
                try:
                    seen.add(json.loads(line)["node"])
                except ValueError:
                    pass
    return len(seen) >= nodes


def measure(backend: str, nodes: int, timeout: float = 600) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"cb-bench-{backend}-") as tmp:
        spec = ClusterSpec(run_id=f"bench{backend}", run_dir=Path(tmp), nodes=nodes, min_nodes=nodes,
                           max_nodes=nodes, trainer_overrides={"training.max_steps": 100000})
        cluster = create_cluster(backend, spec)
        t0 = time.perf_counter()
        try:
            cluster.up()
            t_up = time.perf_counter()
            cluster.start_training()
            while not _first_step_seen(cluster.events_dir, nodes):
                if time.perf_counter() - t_up > timeout:
                    raise TimeoutError(f"{backend}: no first step within {timeout:.0f}s")
                time.sleep(0.1)
            t_step = time.perf_counter()
        finally:
            t_down0 = time.perf_counter()
            cluster.down()
            t_down = time.perf_counter() - t_down0
    return {"up_s": t_up - t0, "first_step_s": t_step - t_up, "up_to_first_step_s": t_step - t0,
            "teardown_s": t_down}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="local,docker")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    avail = available_backends()
    results: dict[str, dict[str, float]] = {}
    for backend in args.backends.split(","):
        if avail.get(backend, "unknown backend") is not None:
            print(f"{backend}: NOT MEASURED ({avail.get(backend, 'unknown backend')})")
            continue
        if backend == "docker":
            from chaosbench.cluster.docker.images import node_image
            t = time.perf_counter()
            node_image()
            print(f"docker: image build/reuse {time.perf_counter() - t:.1f}s (not part of the figures)")
        runs = [measure(backend, args.nodes) for _ in range(args.repeat)]
        results[backend] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"\n{args.nodes} nodes, median of {args.repeat}")
    print(f"{'backend':8} {'up':>8} {'start->step1':>13} {'up->step1':>10} {'teardown':>9}")
    for b, r in results.items():
        print(f"{b:8} {r['up_s']:7.1f}s {r['first_step_s']:12.1f}s {r['up_to_first_step_s']:9.1f}s "
              f"{r['teardown_s']:8.1f}s")
    if "local" in results and "docker" in results:
        lo, do = results["local"], results["docker"]
        print(f"docker/local: up->step1 {do['up_to_first_step_s'] / lo['up_to_first_step_s']:.2f}x, "
              f"teardown {do['teardown_s'] / lo['teardown_s']:.2f}x")
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
