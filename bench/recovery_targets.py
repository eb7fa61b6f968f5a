"""Every recovery-speed target of docs/recovery.md, measured in one command, stock torchrun alongside.

    python bench/recovery_targets.py [--reps 5] [--goodput-minutes 5] [--out DIR]

Runs, one after the other on this machine (nothing else should run meanwhile):

  1. bench/recovery.py, local backend: c10d, c10d-links and etcd-v3, crash (SIGKILL) and silent node (SIGSTOP),
     stock torchrun + toy DDP script in the same run, crash and silent node (--stock-pause);
  2. bench/recovery.py, docker backend: etcd-v3, crash and silent node; its stock baseline runs in the
     same run but on the local backend (recovery.py always runs stock locally): labelled so;
  3. bench/goodput.py, docker: fault-free versus one node loss per minute for --goodput-minutes;
  4. bench/false_detection.py, docker: a healthy cluster with every core saturated for 60 s.

and prints one table: each target, its median over --reps with the range and how many reps recovered
(a rep that did not recover counts as slower than any that did, and is listed by name), the stock
figure from the same run, the load average at the faults; then per-phase medians of every row and
the goodput and false-detection lines. Raw outputs and JSON stay in --out.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run(name: str, argv: list[str], out: Path) -> None:
    log = out / f"{name}.txt"
    print(f"# {name}: {' '.join(argv)}  (output: {log})", flush=True)
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, *argv], stdout=f, stderr=subprocess.STDOUT, cwd=HERE.parent)
    print(f"#   done in {time.monotonic() - t0:.0f} s (exit {proc.returncode})", flush=True)


def _runs(path: Path, case: str, rdzv: str) -> list[dict]:
    """The reps of one case whose fault was injected (a rep that broke during start-up is no recovery)."""
    if not path.exists():
        return []
    return [r for r in json.loads(path.read_text())["runs"]
            if r["case"] == case and r["rdzv"] == rdzv and r.get("injected", True)]


def _value(r: dict, after_detection: bool) -> float | None:
    if r.get("total_s") is None:
        return None
    return r["total_s"] - (r.get("detection_s") or 0) if after_detection else r["total_s"]


def _fmt(runs: list[dict], after_detection: bool = False) -> str:
    """Median over *every* rep, a rep that never recovered counted as slower than any that did (it
    cannot make the figure look better); the range is of the reps that recovered; k/n always shown."""
    if not runs:
        return "not run"
    vals = [_value(r, after_detection) for r in runs]
    ok = [v for v in vals if v is not None]
    if not ok:
        return f"not recovered (0/{len(runs)} within the bound)"
    med = statistics.median([math.inf if v is None else v for v in vals])
    head = f"{med:.2f} s" if med != math.inf else "median not recovered"
    return f"{head} ({min(ok):.2f}-{max(ok):.2f}), {len(ok)}/{len(runs)} recovered"


def _loads(runs: list[dict]) -> str:
    loads = [r["load"] for r in runs if r.get("load") is not None]
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"


def _phases(runs: list[dict]) -> str:
    """Per-phase medians over the reps that recovered (one that did not has no phases)."""
    ok = [r for r in runs if r.get("total_s") is not None]
    if not ok:
        return "-"
    parts = []
    for k in ("detection_s", "rendezvous_s", "restore_s", "first_step_s"):
        vals = [r[k] for r in ok if r.get(k) is not None]
        parts.append(f"{statistics.median(vals):.2f}" if vals else "-")
    return " / ".join(parts) + f" (n={len(ok)})"


def _unrecovered(runs: list[dict]) -> list[str]:
    return [f"{r['case']} ({r['rdzv']}): {r.get('note') or 'no training step by a new worker within the bound'}"
            for r in runs if r.get("total_s") is None]


# Every row docs/recovery.md quotes: (label, target, json, case, rdzv, after_detection, stock: (json, case, rdzv) | None, stock label)
ROWS = [
    ("crash, local, fault -> first step (etcd-v3)", "<= 1.0 s", "local", "tuned trainer, kill", "etcd-v3", False,
     ("local", "stock torchrun+toy, kill", "etcd-v3"), ""),
    ("crash, docker (etcd-v3)", "<= 1.5 s", "docker", "tuned trainer, kill", "etcd-v3", False,
     ("docker", "stock torchrun+toy, kill", "etcd-v3"), " [stock: local backend]"),
    ("crash, c10d rendezvous + peer links (c10d-links), local", "<= 2.0 s", "local", "tuned trainer, kill",
     "c10d-links", False, ("local", "stock torchrun+toy, kill", "c10d"), ""),
    ("crash, torch's c10d (tuned settings, no links), local", "-", "local", "tuned trainer, kill", "c10d", False,
     ("local", "stock torchrun+toy, kill", "c10d"), ""),
    ("silent node (SIGSTOP), local, fault -> first step", "-", "local", "tuned trainer, pause", "etcd-v3", False,
     ("local", "stock torchrun+toy, pause", "etcd-v3"), ""),
    ("silent node (SIGSTOP), local, detection -> first step", "<= 2.5 s", "local", "tuned trainer, pause", "etcd-v3",
     True, None, ""),
    ("silent node (SIGSTOP), docker, fault -> first step", "-", "docker", "tuned trainer, pause", "etcd-v3", False,
     ("local", "stock torchrun+toy, pause", "etcd-v3"), " [stock: local backend]"),
    ("silent node (SIGSTOP), docker, detection -> first step", "<= 2.5 s", "docker", "tuned trainer, pause", "etcd-v3",
     True, None, ""),
    ("silent node on c10d-links (no etcd witness), local", "-", "local", "tuned trainer, pause", "c10d-links", False,
     ("local", "stock torchrun+toy, pause", "c10d"), ""),
]


def report(out: Path) -> tuple[list[str], list[str]]:
    """(the table of every row above from out/local.json and out/docker.json, then per-phase medians
    and every rep that did not recover, named)."""
    files = {"local": out / "local.json", "docker": out / "docker.json"}
    lines = [f"{'case':<56} {'target':<9} {'measured (median, range, recovered)':<44} {'stock, same run':<44} load@faults",
             "-" * 170]
    phases, missing = [], []
    for name, target, src, case, rdzv, after_det, stock, stock_note in ROWS:
        runs = _runs(files[src], case, rdzv)
        stock_runs = _runs(files[stock[0]], stock[1], stock[2]) if stock else []
        stock_cell = (_fmt(stock_runs) + stock_note) if stock else "-"
        lines.append(f"{name:<56} {target:<9} {_fmt(runs, after_det):<44} {stock_cell:<44} {_loads(runs)}")
        if not after_det:
            phases.append(f"  {name}: {_phases(runs)}")
        missing += _unrecovered(runs) if not after_det else []
        missing += [m for m in _unrecovered(stock_runs) if m not in missing]
    tail = ["", "per phase, medians of the reps that recovered, s (detection / rendezvous / restore / first step):",
            *phases, "", f"reps that did not recover ({len(missing)}):", *(f"  {m}" for m in missing or ["none"])]
    return lines, tail


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--goodput-minutes", type=float, default=5.0)
    ap.add_argument("--load-s", type=float, default=60.0)
    ap.add_argument("--stock-pause-bound", type=float, default=45.0,
                    help="how long a paused stock node is given to recover (it does not: gloo waits 30 min)")
    ap.add_argument("--out", type=Path, default=Path("recovery-targets"))
    ap.add_argument("--skip", default="", help="comma list of steps to skip: local,docker,goodput,false")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    reps = str(args.reps)
    if "local" not in skip:
        # --stock-pause: the silent-node rows get their stock figure from the same run (a paused stock
        # node does not recover: gloo waits 30 min; each such rep costs --stock-pause-bound seconds)
        _run("local", [str(HERE / "recovery.py"), "--reps", reps, "--rdzv", "c10d,c10d-links,etcd-v3", "--faults", "kill,pause",
                       "--stock-pause", "--stock-pause-bound", str(args.stock_pause_bound),
                       "--json", str(out / "local.json")], out)
    if "docker" not in skip:
        _run("docker", [str(HERE / "recovery.py"), "--backend", "docker", "--reps", reps, "--rdzv", "etcd-v3",
                        "--faults", "kill,pause", "--json", str(out / "docker.json")], out)
    if "goodput" not in skip:
        _run("goodput", [str(HERE / "goodput.py"), "--backend", "docker", "--minutes", str(args.goodput_minutes),
                         "--json", str(out / "goodput.json")], out)
    if "false" not in skip:
        _run("false_detection", [str(HERE / "false_detection.py"), "--backend", "docker", "--load-s",
                                 str(args.load_s), "--json", str(out / "false_detection.json")], out)

    table, tail = report(out)
    print()
    print("\n".join(table))
    if (out / "goodput.json").exists():
        g = json.loads((out / "goodput.json").read_text())
        recs = g["faulty"].get("recoveries", [])
        rec = [r["total_s"] for r in recs if r["total_s"] is not None]
        print(f"{'goodput, one node loss per minute, docker':<56} {'>= 95 %':<9} "
              f"{100 * g['goodput']:.1f} % ({g['faulty']['kills']} losses in {g['faulty']['window_s']:.0f} s; "
              f"recoveries {', '.join(f'{x:.1f}' for x in sorted(rec))} s; "
              f"{len(recs) - len(rec)} of {len(recs)} not recovered)")
    if (out / "false_detection.json").exists():
        f = json.loads((out / "false_detection.json").read_text())
        print(f"{'false detections, CPU saturated ' + str(int(f['load_s'])) + ' s, docker':<56} {'0':<9} "
              f"restarts {f['restarts']}, health checks {f['health_check_failed']}, liveness verdicts "
              f"{f['liveness_verdicts']} ({f['hogs']} busy processes; load {f['load_avg_during']})")
    print("\n".join(tail))
    return 0


if __name__ == "__main__":
    sys.exit(main())
