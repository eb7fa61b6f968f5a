"""Goodput under one node loss per minute: the tuned reference trainer on 3 nodes, fault-free vs faulty.

    python bench/goodput.py [--minutes 5] [--baseline-s 120] [--rdzv etcd-v3] [--spare | --standby] [--keep DIR]

Two clusters, one after the other in the same run, with the same settings (docs/recovery.md's tuned
settings, warm start, tiny config):

  fault-free  3 nodes train; after --settle-s the window opens: steps/s over --baseline-s.
  faulty      3 nodes train; the window opens the same way and lasts --minutes. One minute apart
              (the first 30 s into the window) one training node is SIGKILLed (agent + worker; the
              node that has trained longest, so every node takes its turn), and a replacement node
              starts at once under a new name, the way a scheduler replaces a lost machine: the
              survivors restart at world size 2 (or 3, when the replacement is quick enough to make
              the same round), and the replacement's arrival restarts them once more at 3.
              --spare instead runs one extra node from the start (--nnodes=2:3 with 4 nodes), held
              in torchrun's redundancy list, to take the lost node's place in the next round. On
              torch 2.15 that livelocks: a node that lands in the wait list while a round fills up to
              max_nodes stays in it, and every agent restarts for it again and again.
              --standby instead keeps one warm node outside the rendezvous (booted, torch imported,
              waiting for its own go file; both phases run it) and releases it at the loss, so the
              replacement can make the survivors' own round: one restart per loss, not two.

goodput = net training progress per second in the faulty window / fault-free steps/s, where net
progress = the highest step completed by the window's end - the highest completed at its start, so
work redone after a rollback counts once. The two phases run minutes apart, and this machine's speed
drifts by more than a loss costs, so each loss's cost is also measured against the same cluster's rate
just before it (`_loss_cost`): 1 - mean cost / 60 s is the goodput that drift does not move. Each loss's recovery (fault -> first step by a new worker)
is printed too, measured by chaosbench.checks.recovery like every report.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recovery import COMMON_TRAINER, TUNED_RDZV, TUNED_TRAINER, _machine, _steps_together, _wait  # noqa: E402

from chaosbench.checks.history import History  # noqa: E402
from chaosbench.checks.recovery import recoveries  # noqa: E402
from chaosbench.cluster import ClusterSpec, create_cluster  # noqa: E402
from chaosbench.observer.tail import read_events  # noqa: E402

NODES = 3


def _steps(events: list[dict]) -> list[tuple[float, int, str, int]]:
    return [(e["ts"], int(e["step"]), e.get("node", ""), e.get("pid")) for e in events
            if e.get("event") == "step" and "step" in e and "ts" in e]


def _highest_by(steps, t: float) -> int:
    return max((s for ts, s, _n, _p in steps if ts <= t), default=0)


def _loss_cost(steps, t: float, end: float, before_s: float = 15.0, after_s: float = 15.0) -> float:
    """Seconds of training one loss cost, against the same cluster's rate in the before_s before it:
    (rate * after_s - net progress in the after_s after it) / rate. Both restarts of a cold
    replacement and a standby's refill fall inside after_s; the machine's drift between the two
    phases (+-10 % here) does not."""
    after_s = min(after_s, end - t)
    rate = (_highest_by(steps, t) - _highest_by(steps, t - before_s)) / before_s
    return (rate * after_s - (_highest_by(steps, t + after_s) - _highest_by(steps, t))) / rate if rate else float("nan")


def _victim(cluster, killed: set[str], protect: set[str]) -> str:
    """The node that has trained longest among those training now (first step event earliest)."""
    ev = read_events(cluster.events_dir)
    now = time.time()
    first, last = {}, {}
    for ts, _s, node, _p in _steps(ev):
        first[node] = min(first.get(node, ts), ts)
        last[node] = max(last.get(node, ts), ts)
    training = [n for n in first if n not in killed | protect and now - last[n] < 5
                and cluster.node_status(n) == "running"]
    if not training:
        raise RuntimeError("no training node to kill")
    return min(training, key=lambda n: first[n])


def run_phase(name: str, root: Path, args, faulty: bool) -> dict:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    spare = 1 if (faulty or args.spare_in_baseline) and args.spare else 0
    spec = ClusterSpec(run_id=f"gp{name}{os.getpid()}"[:40], run_dir=run_dir, nodes=NODES, min_nodes=NODES - 1,
                       max_nodes=NODES, spare_nodes=spare, rendezvous=args.rdzv, max_restarts=1000,
                       trainer_overrides={**COMMON_TRAINER, **TUNED_TRAINER}, rdzv_timeouts=dict(TUNED_RDZV))
    protect = {"node-0"} if args.rdzv == "c10d" else set()   # node-0's agent hosts the c10d store
    out: dict = {"phase": name}
    with create_cluster(args.backend, spec) as cluster:
        cluster.start_training()
        _wait(lambda ev: _steps_together(ev, NODES) >= 10, args.start_timeout,
              f"{NODES} nodes training together", cluster.events_dir)
        for _ in range(spare):
            cluster.add_node()
        standby = cluster.add_standby() if args.standby else None   # in both phases: same containers
        time.sleep(args.settle_s)            # spares and the standby finish their imports; steady state
        t0 = time.time()
        duration = args.minutes * 60 if faulty else args.baseline_s
        killed: set[str] = set()
        kills = []
        next_kill = t0 + 30
        released, next_look = None, 0.0
        while time.time() < t0 + duration:
            if faulty and time.time() >= next_kill:
                victim = _victim(cluster, killed, protect)
                at = time.time()                # the loss's time: the kill command, as faults.jsonl says
                with open(run_dir / "faults.jsonl", "a") as f:
                    f.write(json.dumps({"ts": at, "id": f"f{len(kills) + 1}", "fault": "kill_node",
                                        "action": "inject", "target": victim, "params": {}}) + "\n")
                cluster.kill_node(victim)
                killed.add(victim)
                kills.append((at, victim, os.getloadavg()[0]))
                if standby:                     # the warm replacement joins; the pool refills later
                    cluster.release_standby(standby)
                    released, standby = standby, None
                else:
                    cluster.add_node()          # the replacement (with spares: the next spare)
                next_kill += 60
            elif released and time.time() >= next_look:   # the pool's next node boots once the
                next_look = time.time() + 1                # released one trains (not during the restart)
                if any(n == released for _t, _s, n, _p in _steps(read_events(cluster.events_dir))):
                    standby, released = cluster.add_standby(), None
            time.sleep(0.1)
        t1 = time.time()
        time.sleep(1)
        steps = _steps(read_events(cluster.events_dir))
    progress = _highest_by(steps, t1) - _highest_by(steps, t0)
    out.update(window_s=round(t1 - t0, 1), steps=progress, steps_per_s=round(progress / (t1 - t0), 3),
               load_end=round(os.getloadavg()[0], 2), kills=len(kills))
    if faulty:
        out["loss_costs_s"] = [round(_loss_cost(steps, t, t1), 2) for t, _v, _l in kills]
        recs = recoveries(History.load(run_dir))
        out["recoveries"] = [{"victim": v, "load": round(la, 2), "total_s": r.total_s, "lost_steps": r.lost_steps,
                              "tier": r.tier} for (_t, v, la), r in zip(kills, recs)]
        out["unrecovered"] = len(kills) - len(recs)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0, help="faulty window; one node loss per minute")
    ap.add_argument("--baseline-s", type=float, default=120.0, help="fault-free window")
    ap.add_argument("--settle-s", type=float, default=15.0, help="wait after 3 nodes train before a window opens")
    ap.add_argument("--rdzv", default="etcd-v3", choices=("etcd-v3", "c10d"),
                    help="etcd-v3 (default): any node may die; c10d: node-0 hosts the store and is spared")
    ap.add_argument("--spare", action="store_true",
                    help="run one hot spare beyond max_nodes (livelocks on torch 2.15's rendezvous: see docs/recovery.md)")
    ap.add_argument("--standby", action="store_true",
                    help="replace from a warm standby held outside the rendezvous (Cluster.add_standby; docker), "
                         "released at the loss; the next standby boots once it trains")
    ap.add_argument("--spare-in-baseline", action="store_true",
                    help="run the idle spare in the fault-free phase too (same process count)")
    ap.add_argument("--backend", choices=("local", "docker"), default="local")
    ap.add_argument("--start-timeout", type=float, default=240.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", type=Path, help="keep run directories under this directory")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    root = args.keep or Path(tempfile.mkdtemp(prefix="goodput-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"# machine: {_machine()}")
    print(f"# nodes={NODES} rdzv={args.rdzv} spare={args.spare} standby={args.standby} baseline={args.baseline_s:.0f}s "
          f"faulty={args.minutes * 60:.0f}s (one kill per minute) tuned rdzv-conf={TUNED_RDZV}", flush=True)
    t_start = time.monotonic()
    try:
        base = run_phase("faultfree", root, args, faulty=False)
        print(f"fault-free: {base}", flush=True)
        hit = run_phase("faulty", root, args, faulty=True)
        print(f"faulty:     {hit}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    ratio = hit["steps_per_s"] / base["steps_per_s"] if base["steps_per_s"] else float("nan")
    totals = sorted(r["total_s"] for r in hit.get("recoveries", []) if r["total_s"] is not None)
    print()
    print(f"fault-free {base['steps_per_s']:.2f} steps/s over {base['window_s']:.0f}s; with {hit['kills']} node "
          f"losses {hit['steps_per_s']:.2f} steps/s over {hit['window_s']:.0f}s -> goodput {100 * ratio:.1f}%")
    costs = hit.get("loss_costs_s") or []
    if costs:
        mean = sum(costs) / len(costs)
        print(f"per loss, against the rate of the 15 s before it: {', '.join(f'{c:.1f}' for c in costs)} s "
              f"(mean {mean:.2f} s) -> at one loss a minute {100 * (1 - mean / 60):.1f}% of the undisturbed rate")
    if totals:
        print(f"recoveries: {', '.join(f'{t:.1f}' for t in totals)} s (median {totals[len(totals) // 2]:.1f} s); "
              f"not recovered: {hit['unrecovered']}")
    print(f"# machine at end: {_machine()}  wall={time.monotonic() - t_start:.0f}s")
    if args.json:
        args.json.write_text(json.dumps({"machine": _machine(), "faultfree": base, "faulty": hit,
                                         "goodput": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
