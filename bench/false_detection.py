"""False failure detections on loaded but healthy nodes: nothing fails, every core is saturated.

    python bench/false_detection.py [--backend local|docker] [--load-s 60] [--hogs N] [--rdzv etcd-v3]

A 3-node cluster with the tuned settings of docs/recovery.md (liveness leases, peer links with
their 0.2-s heartbeat and 1.2-s silence suspicion, the trainer's 3-s health check) trains until
every node has done 10 steps together, runs a quiet window, then starts --hogs busy-looping
processes (default: 2 per core) on the host for --load-s seconds: the nodes' agents, workers and
link threads compete for the cores with them, as on a machine whose data loader or a neighbour's
job has eaten the CPU. No fault is injected, so every one of these counts as a false detection:

  restarts       a worker process started after the load began (a new pid stepping)
  health checks  `health_check_failed` events
  liveness       agent log lines where liveness declared a peer dead (its link closed, or silent while
                 etcd missed its lease refresh; a worker group restarted for a dead participant)

The figure to hold is 0 of each; steps/s quiet versus loaded is printed for scale.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recovery import COMMON_TRAINER, TUNED_RDZV, TUNED_TRAINER, _machine, _steps_together, _wait  # noqa: E402

from chaosbench.cluster import ClusterSpec, create_cluster  # noqa: E402
from chaosbench.observer.tail import read_events  # noqa: E402

NODES = 3
LIVENESS_VERDICTS = ("is dead (", "of this round is dead", "of this round are dead")
STAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})")   # ours, or docker's (UTC, as here)


def _hog() -> None:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        pass


def _verdicts(logs: str, t0: float, t1: float) -> list[str]:
    """Liveness lines ("2026-11-23 08:44:50,273 chaosbench.rendezvous... is dead (its link closed)") within [t0, t1]."""
    out = []
    for line in logs.splitlines():
        if any(v in line for v in LIVENESS_VERDICTS):
            m = STAMP.search(line)
            if m is None:
                continue
            ts = time.mktime(time.strptime(" ".join(m.groups()), "%Y-%m-%d %H:%M:%S"))
            if t0 - 1 <= ts <= t1:
                out.append(line)
    return out


def _steps_in(events, t0: float, t1: float) -> int:
    steps = [int(e["step"]) for e in events if e.get("event") == "step" and t0 <= e.get("ts", 0) <= t1]
    return (max(steps) - min(steps)) if steps else 0


def measure(args, root: Path) -> dict:
    spec = ClusterSpec(run_id=f"fd{os.getpid()}", run_dir=root / "run", nodes=NODES, min_nodes=NODES - 1,
                       max_nodes=NODES, rendezvous=args.rdzv, max_restarts=100,
                       trainer_overrides={**COMMON_TRAINER, **TUNED_TRAINER}, rdzv_timeouts=dict(TUNED_RDZV))
    spec.run_dir.mkdir(parents=True)
    with create_cluster(args.backend, spec) as cluster:
        cluster.start_training()
        _wait(lambda ev: _steps_together(ev, NODES) >= 10, args.start_timeout, f"{NODES} nodes training together",
              cluster.events_dir)
        time.sleep(args.settle_s)
        q0 = time.time()
        time.sleep(args.quiet_s)
        t0 = time.time()
        before = {(e.get("node"), e.get("pid")) for e in read_events(cluster.events_dir) if e.get("event") == "step"}
        hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
        for h in hogs:
            h.start()
        loads = []
        try:
            while time.time() < t0 + args.load_s:
                time.sleep(5)
                loads.append(os.getloadavg()[0])
        finally:
            for h in hogs:
                h.terminate()
            for h in hogs:
                h.join(5)
        t1 = time.time()
        time.sleep(args.after_s)              # a detection in the load's last seconds shows up here
        events = read_events(cluster.events_dir)
        t_end = time.time()                   # teardown kills nodes: its link losses are not counted
    # after down(): it collects the docker nodes' logs
    logs = "".join(p.read_text(errors="replace") for p in sorted((spec.run_dir / "logs").glob("node-*.log")))
    new_workers = sorted({(e.get("node"), e.get("pid")) for e in events
                          if e.get("event") == "step" and e.get("ts", 0) >= t0} - before)
    return {
        "restarts": len(new_workers),
        "health_check_failed": sum(1 for e in events if e.get("event") == "health_check_failed" and e.get("ts", 0) >= t0),
        "liveness_verdicts": len(_verdicts(logs, t0, t_end)),
        "quiet_steps_per_s": round(_steps_in(events, q0, t0) / max(t0 - q0, 1e-9), 2),
        "loaded_steps_per_s": round(_steps_in(events, t0, t1) / max(t1 - t0, 1e-9), 2),
        "load_avg_during": [round(x, 1) for x in loads],
        "hogs": args.hogs, "load_s": args.load_s,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("local", "docker"), default="local")
    ap.add_argument("--rdzv", default="etcd-v3", choices=("etcd-v3", "c10d"))
    ap.add_argument("--load-s", type=float, default=60.0)
    ap.add_argument("--hogs", type=int, default=2 * (os.cpu_count() or 1), help="busy-looping processes")
    ap.add_argument("--quiet-s", type=float, default=20.0)
    ap.add_argument("--settle-s", type=float, default=5.0)
    ap.add_argument("--after-s", type=float, default=8.0)
    ap.add_argument("--start-timeout", type=float, default=240.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    print(f"# machine: {_machine()}")
    print(f"# backend={args.backend} rdzv={args.rdzv} nodes={NODES} hogs={args.hogs} load={args.load_s:.0f}s "
          f"tuned rdzv-conf={TUNED_RDZV} trainer={TUNED_TRAINER}", flush=True)
    with tempfile.TemporaryDirectory(prefix="false-detection-") as tmp:
        out = measure(args, Path(tmp))
    print(f"false detections under {args.hogs} busy processes for {args.load_s:.0f} s ({args.backend}, {args.rdzv}): "
          f"restarts {out['restarts']}, health_check_failed {out['health_check_failed']}, "
          f"liveness verdicts {out['liveness_verdicts']}; steps/s quiet {out['quiet_steps_per_s']} "
          f"-> loaded {out['loaded_steps_per_s']}; load average {out['load_avg_during']}")
    print(f"# machine at end: {_machine()}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if out["restarts"] == out["health_check_failed"] == out["liveness_verdicts"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
