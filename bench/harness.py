"""Where a scenario's wall time goes: images, cluster up, first trainer event, training, stop and
collection, teardown, report. Runs each named scenario (default: the main job on docker), timed
from the runner's own messages and the trainer's events, so a speed change shows the phase it won in.

    python bench/harness.py [SCENARIO ...] [--backend docker|local] [--reps 3]
    python bench/harness.py --against /tmp/base-checkout --reps 3   # before/after, alternated, one window
    python bench/harness.py --suite [--reps 1]                      # median wall per library scenario
    python bench/harness.py --junit reports/chaos-junit.xml         # a chaos suite's own times
    python bench/harness.py --load rep1.json rep2.json              # summarise saved --json runs
    python bench/harness.py scenarios/*.yaml --keep /tmp/runs       # then bench/story_slack.py /tmp/runs
                                                     # (with --against: /tmp/runs/against and /tmp/runs/this)

Prints one row per run, the median (min-max) of every phase per scenario and code tree, and the
overhead (wall time minus the first-to-last step span) as a share of the wall time; `--json` for
machines. `--against DIR` runs DIR's code (another checkout: DIR/bench/harness.py --json) and this
tree's in turn, rep by rep, so both see the same machine load; each run is its own process.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chaosbench.runner import RunOptions, run_scenario   # noqa: E402

# runner message prefix -> the phase boundary it marks
MARKS = {"creating": "cluster_up_start", "cluster up": "training_start", "stopping": "stop",
         "collecting": "collect_start", "cluster torn down": "torn_down", "teardown incomplete": "torn_down"}


def steps_span(run_dir: Path) -> tuple[float | None, float | None]:
    """First event and first/last step times over every rank's events, on the run's corrected timeline
    (History: a node whose clock the scenario skews stamps its events in its own time)."""
    from chaosbench.checks.history import History
    events = [e for e in History.load(run_dir).events if isinstance(e.get("ts"), (int, float))]
    ts_step = [e["ts"] for e in events if e.get("event") == "step"]
    return (min((e["ts"] for e in events), default=None)), (ts_step and (min(ts_step), max(ts_step))) or None


def one_run(scenario: str, backend: str, report_dir: Path) -> dict:
    marks: dict[str, float] = {}

    def on_message(msg: str) -> None:
        for prefix, name in MARKS.items():
            if msg.startswith(prefix):
                marks.setdefault(name, time.time())

    t_images = time.time()
    if backend == "docker":
        from chaosbench.cluster.docker import images
        images.node_image()          # a no-op when the images exist: its cost is the check
    def create(name, spec, **kw):   # the cluster, its teardown timed (the runner says only when it ends)
        from chaosbench.cluster import create_cluster
        cluster = create_cluster(name, spec, **kw)
        down = cluster.down

        def timed_down():
            marks.setdefault("teardown_start", time.time())
            down()
        cluster.down = timed_down
        return cluster

    start = time.time()
    out = run_scenario(scenario, RunOptions(backend=backend, report_dir=report_dir, on_message=on_message,
                                            cluster_factory=create))
    end = time.time()
    first_event, span = steps_span(out.run_dir)
    m = {k: marks.get(k) for k in {*MARKS.values(), "teardown_start"}}

    def d(a, b):
        return round(b - a, 2) if a is not None and b is not None else None
    phases = {
        "images": round(start - t_images, 2),
        "cluster_up": d(m["cluster_up_start"], m["training_start"]),
        "first_event": d(m["training_start"], first_event),
        "first_step": d(first_event, span[0] if span else None),
        "training": d(span[0], span[1]) if span else None,
        "stop_after_last_step": d(span[1] if span else None, m["stop"]),
        "heal_at_stop": d(m["stop"], m["collect_start"]),
        "collection": d(m["collect_start"], m["teardown_start"]),
        "teardown": d(m["teardown_start"], m["torn_down"]),
        "report": d(m["torn_down"], end),
    }
    wall = end - start
    training = phases["training"] or 0.0
    return {"scenario": Path(scenario).stem, "backend": backend, "verdict": out.result.verdict if out.result else None,
            "wall_s": round(wall, 2), "overhead_s": round(wall - training, 2),
            "overhead_share": round((wall - training) / wall, 3) if wall else None, "phases_s": phases}


# library scenarios of a typical shape for --suite: one node loss, a join, a full restart, an outage
SUITE = ("node_loss", "node_join", "total_failure_restart", "s3_outage", "worker_crash")


def run_in(tree: Path, scenario: str, backend: str, keep: Path | None = None) -> dict:
    """One run with `tree`'s code, in its own process (its harness.py --json [--keep KEEP])."""
    out = subprocess.run([sys.executable, str(tree / "bench" / "harness.py"), scenario, "--backend", backend,
                          "--json", *(["--keep", str(keep)] if keep else [])], capture_output=True, text=True, cwd=tree)
    try:
        row = json.loads(out.stdout[out.stdout.index("["):])[0]
    except (ValueError, IndexError):
        raise SystemExit(f"harness in {tree} failed (rc {out.returncode}):\n{out.stderr[-3000:]}")
    return {**row, "tree": str(tree)}


def spread(values: list) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    med = statistics.median(vals)
    return f"{med:.1f}" if len(vals) == 1 else f"{med:.1f} ({min(vals):.1f}-{max(vals):.1f})"


def summary(rows: list[dict]) -> list[str]:
    """Per (tree, scenario): the median (min-max) of wall, overhead and every phase."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r.get("tree", "this tree"), r["scenario"]), []).append(r)
    lines = []
    for (tree, sc), rs in groups.items():
        lines.append(f"{sc} [{tree}] x{len(rs)} ({', '.join(str(r['verdict']) for r in rs)})")
        lines.append(f"  {'wall':22} {spread([r['wall_s'] for r in rs])}")
        lines.append(f"  {'overhead':22} {spread([r['overhead_s'] for r in rs])}")
        for name in rs[0]["phases_s"]:
            lines.append(f"  {name:22} {spread([r['phases_s'].get(name) for r in rs])}")
    return lines


def junit_times(path: Path) -> list[tuple[str, float]]:
    """(test id, seconds) of every test case in a pytest --junitxml file, slowest first."""
    out = [(f"{c.get('classname')}::{c.get('name')}", float(c.get("time") or 0))
           for c in ET.parse(path).getroot().iter("testcase")]
    return sorted(out, key=lambda t: -t[1])


def print_junit(path: Path) -> None:
    times = junit_times(path)
    if not times:
        print(f"{path}: no test cases")
        return
    for name, t in times:
        print(f"{t:8.1f}  {name}")
    vals = [t for _, t in times]
    print(f"{len(vals)} tests, total {sum(vals):.0f} s, median {statistics.median(vals):.1f} s "
          f"({min(vals):.1f}-{max(vals):.1f})")


def print_rows(rows: list[dict]) -> None:
    names = list(rows[0]["phases_s"]) if rows else []
    print(f"{'scenario':24} {'verdict':8} {'wall':>6} {'overhead':>9} " + " ".join(f"{n:>12}" for n in names))
    for r in rows:
        print(f"{r['scenario']:24} {str(r['verdict']):8} {r['wall_s']:6.1f} "
              f"{r['overhead_s']:5.1f} ({r['overhead_share']:.0%}) " +
              " ".join(f"{'-' if v is None else f'{v:.2f}':>12}" for v in r["phases_s"].values()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--backend", default="docker", choices=["docker", "local"])
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--suite", action="store_true", help=f"the library scenarios {', '.join(SUITE)}")
    ap.add_argument("--against", type=Path, help="another checkout whose code runs rep by rep with this one")
    ap.add_argument("--junit", type=Path, help="print a chaos suite's per-test times from its JUnit file")
    ap.add_argument("--load", type=Path, nargs="+", help="summarise rows saved by earlier --json runs")
    ap.add_argument("--keep", type=Path, help="keep the run directories here (for bench/story_slack.py)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.junit:
        print_junit(a.junit)
        return 0
    if a.load:
        rows = [r for f in a.load for r in json.loads(f.read_text())]
        print_rows(rows)
        print("\n".join(summary(rows)))
        return 0
    scenarios = a.scenarios or ([str(ROOT / "scenarios" / f"{n}.yaml") for n in SUITE] if a.suite
                                else [str(ROOT / "scenarios" / "node_loss.yaml")])
    rows = []
    if a.keep:
        a.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cb-harness-bench-") as tmp:
        for _ in range(a.reps):
            for sc in scenarios:
                if a.against:   # --keep: each tree's runs in their own folder (KEEP/against, KEEP/this)
                    rows.append(run_in(a.against.resolve(), sc, a.backend, a.keep and a.keep / "against"))
                    rows.append(run_in(ROOT, sc, a.backend, a.keep and a.keep / "this"))
                else:
                    rows.append(one_run(sc, a.backend, a.keep or Path(tmp)))
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print_rows(rows)
    print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
