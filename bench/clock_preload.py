"""The clock fault's preload cost: the reference trainer's step rate with libfaketime preloaded at "+0"
(what every process of a node carries when its scenario has a clock_skew) against without, in one run.

    .venv/bin/python bench/clock_preload.py [--steps 300] [--rounds 2]

Runs the reference trainer (tiny config, memory snapshots every 5 steps, NVMe saves every 20) as one
worker under torchrun --standalone, alternating plain and preloaded runs (--rounds each), and reads
each run's steps/s from its own step events (from its 20th step on: start-up excluded). Also prints the
cost of one time.time() call in a python with and without the preload.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from chaosbench.cluster.node.clock import build_shim, node_clock  # noqa: E402

PER_CALL = ("import time\nn = 300000\nt = time.perf_counter()\nfor _ in range(n): time.time()\n"
            "print((time.perf_counter() - t) / n * 1e9)")


def run_trainer(steps: int, env: dict[str, str], work: Path) -> float:
    """Steps per second of one standalone run, from its step events."""
    events = work / "events"
    events.mkdir(parents=True)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
            "-m", "trainer.train", "--config", "trainer/configs/tiny.yaml",
            "--set", f"training.max_steps={steps}", "--set", f"checkpoint.nvme_dir={work / 'nvme'}",
            "--set", f"checkpoint.memory_dir={work / 'shm'}"]
    subprocess.run(argv, cwd=ROOT, env={**os.environ, "CHAOSBENCH_EVENTS_DIR": str(events), "OMP_NUM_THREADS": "1",
                                        "CHAOSBENCH_RUN_ID": "bench", "CHAOSBENCH_NODE": "node-0", **env},
                   check=True, capture_output=True, timeout=900)
    ts = [e["ts"] for p in events.glob("events-*.jsonl") for e in map(json.loads, p.read_text().splitlines())
          if e.get("event") == "step" and e.get("step", 0) >= 20]
    return (len(ts) - 1) / (max(ts) - min(ts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    build_shim()
    with tempfile.TemporaryDirectory() as tmp:
        _, preload = node_clock(Path(tmp), "node-0", None, str(ROOT))   # the control file holds "+0"
        rates: dict[str, list[float]] = {"plain": [], "preloaded": []}
        for r in range(a.rounds):
            for name, env in (("plain", {}), ("preloaded", preload)):
                rates[name].append(run_trainer(a.steps, env, Path(tmp) / f"{name}{r}"))
                print(f"round {r}: {name:9s} {rates[name][-1]:.2f} steps/s", flush=True)
        calls = {name: float(subprocess.run([sys.executable, "-c", PER_CALL], env={**os.environ, **env},
                                            capture_output=True, text=True, check=True).stdout)
                 for name, env in (("plain", {}), ("preloaded", preload))}
    plain, pre = statistics.median(rates["plain"]), statistics.median(rates["preloaded"])
    print(f"reference trainer (tiny, 1 worker, {a.steps} steps, median of {a.rounds}): plain {plain:.2f} steps/s, "
          f"libfaketime preloaded at +0 {pre:.2f} steps/s: x{pre / plain:.3f}")
    print(f"time.time(): plain {calls['plain']:.0f} ns/call, preloaded {calls['preloaded']:.0f} ns/call "
          f"(x{calls['preloaded'] / calls['plain']:.1f})")


if __name__ == "__main__":
    main()
