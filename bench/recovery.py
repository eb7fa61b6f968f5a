"""Node-loss recovery: stock torchrun versus the tuned reference trainer, side by side in one run.

    python bench/recovery.py [--reps 3] [--rdzv c10d,etcd-v3] [--faults kill,pause] [--backend local|docker]
                             [--stock-pause] [--trainer-defaults] [--json out.json] [--keep DIR]

Per repetition and case: 2 nodes x 1 process train; once both nodes completed --warm-steps steps
together, node-1's whole process tree (agent + worker) is SIGKILLed (`kill`) or SIGSTOPped
(`pause`, a silent failure: no connection reset). Recovery = fault -> first training step
completed by a new worker, broken down (chaosbench.checks.recovery) into detection -> rendezvous
(includes the new worker's start-up) -> restore -> first step. Cases:

  stock    torchrun, default rendezvous settings, bench/toy_ddp.py (rank 0 saves to disk every 5 steps)
  tuned    the reference trainer with the settings of docs/recovery.md (TUNED_* below)
  tuned, previous  (--previous) the same without rejoin_at_once (torch's 0-0.3 s first-round jitter
           before the survivors' re-rendezvous) and with torchrun's 0.1-s monitor interval, not 0.05 s:
           the tuned case as it was until 2026-11-28, for the ratio in one run
  trainer, default rdzv  (--trainer-defaults) the reference trainer with torchrun's default
           rendezvous settings: shows what the rendezvous tuning alone is worth

Reps are interleaved across cases so load drift hits every case alike. Every wait is bounded;
every cluster is torn down (also on Ctrl-C / SIGTERM). The stock baseline always runs locally.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recovery_split import SPLIT  # noqa: E402
from recovery_stats import PHASES, Rep, measure, ratio, summarize, table  # noqa: E402
from recovery_stock import StockCluster  # noqa: E402

from chaosbench.cluster import ClusterSpec, available_backends, create_cluster  # noqa: E402
from chaosbench.observer.tail import read_events  # noqa: E402

KILLED = "node-1"   # with c10d, node-0's agent hosts the rendezvous store (launch.py): lose the other one
SURVIVOR = "node-0"
STEP_SLEEP = 0.02   # both sides pace their steps alike, so lost steps compare and the CPU is not saturated
# torchrun --rdzv-conf for the tuned case: a dead node's keep-alive expires after 1 s x 3 attempts
# (torch default 5 s x 3) and a round completes 1 s after min_nodes joined (default 30 s). Not 1 x 2:
# a live agent's heartbeat is routinely 2 intervals old, so with 2 attempts agents expire themselves
# after a round and a joining node is never admitted (docs/scenario-library.md).
# rejoin_at_once: the survivors' re-rendezvous skips torch's first-round jitter (chaosbench/rendezvous/handler.py;
# our c10d-links and etcd-v3 backends only, torch's c10d ignores it).
TUNED_RDZV = {"keep_alive_interval": 1, "keep_alive_max_attempt": 3, "last_call_timeout": 1, "join_timeout": 120,
              "rejoin_at_once": 1}
PREVIOUS_RDZV = {k: v for k, v in TUNED_RDZV.items() if k != "rejoin_at_once"}
# torchrun's agent looks at its workers (and asks the rendezvous for dead members) every monitor
# interval: 0.1 s (chaosbench's launcher default) is up to 0.1 s between a failed worker and the restart
TUNED_LAUNCHER = ["--monitor-interval=0.05"]
TUNED_TRAINER = {"elastic.health_check_timeout_s": 3.0, "elastic.health_check_interval_steps": 1,
                 "checkpoint.memory_snapshot_interval": 5}
COMMON_TRAINER = {"training.max_steps": 10**7, "training.step_sleep_s": STEP_SLEEP}


@dataclass(frozen=True)
class Case:
    kind: str    # stock | stock-liveness | tuned | tuned-previous | tuned-cold | tuned-polling | trainer-defaults
    rdzv: str
    fault: str   # kill | pause

    @property
    def label(self) -> str:
        name = {"stock": "stock torchrun+toy", "tuned": "tuned trainer", "tuned-previous": "tuned, previous",
                "tuned-cold": "tuned, cold start",
                "tuned-polling": "tuned, no liveness", "stock-liveness": "stock toy + liveness",
                "trainer-defaults": "trainer, default rdzv"}[self.kind]
        return f"{name}, {self.fault}"

    @property
    def slug(self) -> str:
        return f"{self.kind}-{self.rdzv}-{self.fault}"


def _steps_together(events: list[dict], nodes: int) -> int:
    """Steps completed at world size `nodes` by the node that has done fewest of them."""
    per = {}
    for e in events:
        if e.get("event") == "step" and e.get("world_size") == nodes:
            per[e.get("node")] = per.get(e.get("node"), 0) + 1
    return min(per.values()) if len(per) == nodes else 0


def _wait(pred, timeout: float, what: str, events_dir: Path) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        ev = read_events(events_dir) if events_dir.is_dir() else []
        if pred(ev):
            return ev
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout:.0f}s")
        time.sleep(0.1)


def _make_cluster(case: Case, run_dir: Path, backend: str):
    if case.kind == "stock":
        return StockCluster(run_dir, case.rdzv, step_sleep=STEP_SLEEP)
    if case.kind == "stock-liveness":
        return StockCluster(run_dir, case.rdzv, step_sleep=STEP_SLEEP, liveness=True)
    tuned = case.kind in ("tuned", "tuned-previous", "tuned-cold", "tuned-polling")
    previous = case.kind == "tuned-previous"
    rdzv = PREVIOUS_RDZV if previous else TUNED_RDZV
    spec = ClusterSpec(warm_start=case.kind != "tuned-cold",
                       run_id=f"rb{run_dir.name.replace('-', '')}"[:40], run_dir=run_dir, nodes=2, min_nodes=1,
                       max_nodes=2, rendezvous=case.rdzv, max_restarts=10,
                       launcher_args=list(TUNED_LAUNCHER) if tuned and not previous else [],
                       trainer_overrides={**COMMON_TRAINER, **(TUNED_TRAINER if tuned else {})},
                       rdzv_timeouts=({**rdzv, **({"liveness_ttl": 0} if case.kind == "tuned-polling" else {})}
                                      if tuned else {}))
    return create_cluster(backend, spec)


def run_rep(case: Case, idx: int, root: Path, args) -> Rep:
    run_dir = root / f"{case.slug}-{idx}"
    run_dir.mkdir(parents=True)
    cluster = _make_cluster(case, run_dir, "local" if case.kind.startswith("stock") else args.backend)
    note, load = "", None
    with cluster:
        cluster.start_training()
        ev_dir = cluster.events_dir
        try:
            before = _wait(lambda ev: _steps_together(ev, 2) >= args.warm_steps, args.start_timeout,
                           f"{args.warm_steps} steps on both nodes", ev_dir)
            old_pids = {e.get("pid") for e in before}
            load = os.getloadavg()[0]
            with open(run_dir / "faults.jsonl", "a") as f:
                f.write(json.dumps({"ts": time.time(), "id": "f1", "fault": f"{case.fault}_node",
                                    "action": "inject", "target": KILLED, "params": {}}) + "\n")
            (cluster.kill_node if case.fault == "kill" else cluster.pause_node)(KILLED)
            bound = args.recover_timeout if case.kind != "stock" or case.fault == "kill" else args.stock_pause_bound
            _wait(lambda ev: any(e.get("event") == "step" and e.get("pid") not in old_pids for e in ev),
                  bound, "a training step by a new worker", ev_dir)
            time.sleep(0.3)   # let the other first-incarnation events (restore on every rank) land
        except TimeoutError as exc:
            note = str(exc)
    return measure(run_dir, case.label, rdzv=case.rdzv, stock=case.kind == "stock", load=load, note=note,
                   agent_log=run_dir / "logs" / f"{SURVIVOR}.log")


def previous_ratios(done) -> list[str]:
    """'tuned' against 'tuned, previous' of the same rendezvous backend and fault: what rejoin_at_once is worth."""
    by = {(s.case, s.rdzv): s.med for s in done}
    out = []
    for (case, rdzv), med in by.items():
        if not case.startswith("tuned trainer, "):
            continue
        prev = by.get((case.replace("tuned trainer", "tuned, previous"), rdzv))
        x = prev and ratio(prev["total_s"], med["total_s"])
        if x:
            phases = " ".join(f"{k[:-2]} {prev[k]:.3f}->{med[k]:.3f}" for k in PHASES[:-1]
                              if prev[k] is not None and med[k] is not None)
            out.append(f"# {case} on {rdzv}: {prev['total_s']:.3f} s previous -> {med['total_s']:.3f} s ({x:.2f}x); "
                       f"{phases}")
    return out


def split_lines(done) -> list[str]:
    """Each case's rendezvous phase split by the survivor agent's log (recovery_split.py), where it has one."""
    out = []
    for s in done:
        parts = [f"{k[:-2]} {s.med[k]:.3f}" for k in SPLIT if s.med.get(k) is not None]
        if parts:
            out.append(f"# rendezvous phase of {s.case} on {s.rdzv}: " + " / ".join(parts) + " s (medians)")
    return out


def _cases(args) -> list[Case]:
    out = []
    for fault in args.faults:
        for rdzv in args.rdzv:
            stock = Case("stock", STOCK_OF.get(rdzv, rdzv), fault)   # c10d-links is measured against c10d
            if (fault == "kill" or args.stock_pause) and not args.skip_stock and stock not in out:
                out.append(stock)
            out.append(Case("tuned", rdzv, fault))
            if args.previous:
                out.append(Case("tuned-previous", rdzv, fault))
            if args.cold and fault == "kill":
                out.append(Case("tuned-cold", rdzv, fault))
            if args.polling and rdzv == "etcd-v3":
                out.append(Case("tuned-polling", rdzv, fault))
                if fault == "kill" and not args.skip_stock:
                    out.append(Case("stock-liveness", rdzv, fault))
            if args.trainer_defaults and fault == "kill":
                out.append(Case("trainer-defaults", rdzv, fault))
    return out


STOCK_OF = {"c10d-links": "c10d"}


def _usable_rdzv(names: list[str]) -> list[str]:
    keep = []
    for n in names:
        if n in ("etcd", "etcd-v2") and importlib.util.find_spec("etcd") is None:
            print(f"# rdzv {n}: skipped — torch's etcd (v2) backend needs the python-etcd package, not installed")
            continue
        keep.append(n)
    return keep


def _machine() -> str:
    import torch
    la = os.getloadavg()
    return (f"nproc={os.cpu_count()} load={la[0]:.2f},{la[1]:.2f},{la[2]:.2f} torch={torch.__version__} "
            f"python={sys.version.split()[0]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backend", choices=("local", "docker"), default="local",
                    help="cluster backend for the reference trainer (the stock baseline always runs locally)")
    ap.add_argument("--rdzv", default="c10d,etcd-v3", help="comma list of c10d, c10d-links, etcd-v3, etcd")
    ap.add_argument("--faults", default="kill,pause", help="comma list of kill, pause")
    ap.add_argument("--stock-pause", action="store_true",
                    help="also pause a stock node (it does not recover: gloo waits 30 min; bounded by --stock-pause-bound)")
    ap.add_argument("--stock-pause-bound", type=float, default=45.0)
    ap.add_argument("--trainer-defaults", action="store_true", help="add the trainer with default rdzv settings")
    ap.add_argument("--previous", action="store_true",
                    help="add the tuned trainer as it was before (no rejoin_at_once, 0.1-s monitor interval): ratio in one run")
    ap.add_argument("--cold", action="store_true",
                    help="add the tuned trainer without warm start (every worker a fresh `python -m trainer.train`)")
    ap.add_argument("--polling", action="store_true",
                    help="etcd-v3 only: add the tuned trainer without liveness (liveness_ttl=0, torch's polling "
                         "rendezvous) and the stock toy with liveness (torch's default settings otherwise)")
    ap.add_argument("--skip-stock", action="store_true", help="quick look: no stock baseline (no ratio)")
    ap.add_argument("--warm-steps", type=int, default=12, help="steps both nodes complete together before the fault")
    ap.add_argument("--start-timeout", type=float, default=240.0)
    ap.add_argument("--recover-timeout", type=float, default=120.0)
    ap.add_argument("--json", type=Path, help="write every rep and summary here")
    ap.add_argument("--keep", type=Path, help="keep run directories (events, logs) under this directory")
    args = ap.parse_args(argv)
    args.rdzv = _usable_rdzv([s.strip() for s in args.rdzv.split(",") if s.strip()])
    args.faults = [s.strip() for s in args.faults.split(",") if s.strip()]
    bad = [f for f in args.faults if f not in ("kill", "pause")]
    if bad or not args.rdzv or args.reps < 1:
        ap.error(f"--faults {bad} unknown (kill, pause)" if bad else "--reps must be >= 1 and --rdzv non-empty")
    reason = available_backends().get(args.backend)
    if reason:
        ap.error(f"--backend {args.backend} is not usable here: {reason}")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))

    cases = _cases(args)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="recovery-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"# machine: {_machine()}")
    print(f"# reps={args.reps} backend={args.backend} nodes=2x1 killed={KILLED} warm_steps={args.warm_steps} "
          f"step_sleep={STEP_SLEEP}s tuned rdzv-conf={TUNED_RDZV} tuned launcher={TUNED_LAUNCHER} "
          f"tuned trainer={TUNED_TRAINER}")
    reps: dict[Case, list[Rep]] = {c: [] for c in cases}
    t_start = time.monotonic()
    try:
        for i in range(args.reps):
            for case in cases:
                try:
                    rep = run_rep(case, i, root, args)
                except Exception as exc:   # one broken rep must not lose the others' figures
                    rep = Rep(case=case.label, rdzv=case.rdzv, stock=case.kind == "stock",
                              note=f"rep failed: {type(exc).__name__}: {str(exc)[:200]}")
                reps[case].append(rep)
                if not args.keep and not rep.note:   # keep only what needs a diagnosis
                    shutil.rmtree(root / f"{case.slug}-{i}", ignore_errors=True)
                print(f"rep {i} {case.label:<26} {case.rdzv:<8} total={rep.total_s} det={rep.detection_s} "
                      f"rdzv={rep.rendezvous_s} restore={rep.restore_s} first={rep.first_step_s} "
                      f"lost={rep.lost_steps}st/{rep.lost_s}s tier={rep.tier} load={rep.load and round(rep.load, 2)}"
                      f"{'  ' + rep.note if rep.note else ''}", flush=True)
    except KeyboardInterrupt:
        print("# interrupted: clusters torn down; summarizing what finished", file=sys.stderr)
    finally:
        if not args.keep:
            left = [p.name for p in root.iterdir()] if root.is_dir() else []
            if left:
                print(f"# run directories of the reps with a note kept for diagnosis: {root} ({', '.join(left)})")
            else:
                shutil.rmtree(root, ignore_errors=True)
    done = [summarize(r) for r in reps.values() if r]
    baselines = {s.rdzv: s.med["total_s"] for s in done if s.stock and s.med["total_s"] is not None
                 and "kill" in s.case}
    print()
    print(table(done, baselines))
    for line in previous_ratios(done) + split_lines(done):
        print(line)
    print(f"# times in s (medians over reps; 'ok' = reps that trained again within the bound); lost = steps/"
          f"seconds of training redone; x stock = stock kill median / case median, same rdzv backend")
    print(f"# machine at end: {_machine()}  wall={time.monotonic() - t_start:.0f}s")
    if args.json:
        args.json.write_text(json.dumps({"machine": _machine(), "reps": args.reps, "backend": args.backend,
                                         "runs": [asdict(r) for rs in reps.values() for r in rs],
                                         "summaries": [asdict(s) for s in done]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
