"""Every recovery-speed target of docs/recovery.md, measured in one command, stock torchrun alongside.

    python bench/recovery_targets.py [--reps 5] [--goodput-minutes 5] [--out DIR]

Runs, one after the other on this machine (nothing else should run meanwhile):

  1. bench/recovery.py, local backend: c10d, c10d-links and etcd-v3, crash (SIGKILL) and silent node (SIGSTOP),
     stock torchrun + toy DDP script in the same run;
  2. bench/recovery.py, docker backend: etcd-v3, crash and silent node, stock baseline alongside;
  3. bench/goodput.py, docker: fault-free versus one node loss per minute for --goodput-minutes;
  4. bench/false_detection.py, docker: a healthy cluster with every core saturated for 60 s.

and prints one table: each target, its median over --reps with the range, the stock figure from the
same run and the load average at the faults. Raw outputs and JSON stay in --out.
"""
from __future__ import annotations

import argparse
import json
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
    if not path.exists():
        return []
    return [r for r in json.loads(path.read_text())["runs"] if r["case"] == case and r["rdzv"] == rdzv]


def _fmt(values: list[float]) -> str:
    if not values:
        return "no rep recovered"
    med = statistics.median(values)
    return f"{med:.2f} s ({min(values):.2f}-{max(values):.2f}, n={len(values)})"


def _loads(runs: list[dict]) -> str:
    loads = [r["load"] for r in runs if r.get("load") is not None]
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"


def row(path: Path, case: str, rdzv: str, field: str = "total_s", after_detection: bool = False):
    runs = _runs(path, case, rdzv)
    vals = [r["total_s"] - (r["detection_s"] or 0) if after_detection else r[field]
            for r in runs if r.get("total_s") is not None]
    return _fmt(vals), _loads(runs), len(runs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--goodput-minutes", type=float, default=5.0)
    ap.add_argument("--load-s", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=Path("recovery-targets"))
    ap.add_argument("--skip", default="", help="comma list of steps to skip: local,docker,goodput,false")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    reps = str(args.reps)
    if "local" not in skip:
        _run("local", [str(HERE / "recovery.py"), "--reps", reps, "--rdzv", "c10d,c10d-links,etcd-v3", "--faults", "kill,pause",
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

    local, docker = out / "local.json", out / "docker.json"
    rows = [
        ("crash, local, fault -> first step", "<= 1.0 s", row(local, "tuned trainer, kill", "etcd-v3"),
         row(local, "stock torchrun+toy, kill", "etcd-v3")),
        ("crash, docker", "<= 1.5 s", row(docker, "tuned trainer, kill", "etcd-v3"),
         row(docker, "stock torchrun+toy, kill", "etcd-v3")),
        ("crash, c10d rendezvous + peer links (c10d-links), local", "<= 2.0 s",
         row(local, "tuned trainer, kill", "c10d-links"), row(local, "stock torchrun+toy, kill", "c10d")),
        ("crash, torch's c10d (tuned settings, no links), local", "-", row(local, "tuned trainer, kill", "c10d"),
         row(local, "stock torchrun+toy, kill", "c10d")),
        ("silent node (SIGSTOP), local, fault -> first step", "-", row(local, "tuned trainer, pause", "etcd-v3"), None),
        ("silent node (SIGSTOP), local, detection -> first step", "<= 2.5 s",
         row(local, "tuned trainer, pause", "etcd-v3", after_detection=True), None),
        ("silent node (SIGSTOP), docker, fault -> first step", "-", row(docker, "tuned trainer, pause", "etcd-v3"), None),
        ("silent node (SIGSTOP), docker, detection -> first step", "<= 2.5 s",
         row(docker, "tuned trainer, pause", "etcd-v3", after_detection=True), None),
    ]
    print()
    print(f"{'case':<56} {'target':<9} {'measured (median, range)':<32} {'stock, same run':<32} load@faults")
    print("-" * 150)
    for name, target, (meas, load, _n), stock in rows:
        print(f"{name:<56} {target:<9} {meas:<32} {(stock[0] if stock else '-'):<32} {load}")
    if (out / "goodput.json").exists():
        g = json.loads((out / "goodput.json").read_text())
        rec = [r["total_s"] for r in g["faulty"].get("recoveries", []) if r["total_s"] is not None]
        print(f"{'goodput, one node loss per minute, docker':<56} {'>= 95 %':<9} "
              f"{100 * g['goodput']:.1f} % ({g['faulty']['kills']} losses in {g['faulty']['window_s']:.0f} s; "
              f"recoveries {', '.join(f'{x:.1f}' for x in sorted(rec))} s)")
    if (out / "false_detection.json").exists():
        f = json.loads((out / "false_detection.json").read_text())
        print(f"{'false detections, CPU saturated ' + str(int(f['load_s'])) + ' s, docker':<56} {'0':<9} "
              f"restarts {f['restarts']}, health checks {f['health_check_failed']}, liveness verdicts "
              f"{f['liveness_verdicts']} ({f['hogs']} busy processes; load {f['load_avg_during']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
