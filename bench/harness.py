"""Where a scenario's wall time goes: images, cluster up, first trainer event, training, stop and
collection, teardown, report. One run of each named scenario (default: the main job on docker),
timed from the runner's own messages and the trainer's events, so a speed change shows the phase
it won in.

    python bench/harness.py [SCENARIO ...] [--backend docker|local] [--reps 1]

Prints one row per run and the overhead (wall time minus the first-to-last step span) as a share
of the wall time; `--json` for machines.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
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
    """First event and first/last step times over every rank's events file."""
    ts_any, ts_step = [], []
    for f in (run_dir / "events").glob("*.jsonl"):
        for line in f.read_text(errors="replace").splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e.get("ts"), (int, float)):
                ts_any.append(e["ts"])
                if e.get("event") == "step":
                    ts_step.append(e["ts"])
    return (min(ts_any) if ts_any else None), (ts_step and (min(ts_step), max(ts_step))) or None


def one_run(scenario: str, backend: str, report_dir: Path) -> dict:
    marks: dict[str, float] = {}

    def on_message(msg: str) -> None:
        for prefix, name in MARKS.items():
            if msg.startswith(prefix):
                marks.setdefault(name, time.time())

    t_images = time.time()
    if backend == "docker":
        from chaosbench.cluster import images
        images.node_image()          # a no-op when the images exist: its cost is the check
    start = time.time()
    out = run_scenario(scenario, RunOptions(backend=backend, report_dir=report_dir, on_message=on_message))
    end = time.time()
    first_event, span = steps_span(out.run_dir)
    m = {k: marks.get(k) for k in set(MARKS.values())}

    def d(a, b):
        return round(b - a, 2) if a is not None and b is not None else None
    phases = {
        "images": round(start - t_images, 2),
        "cluster_up": d(m["cluster_up_start"], m["training_start"]),
        "first_event": d(m["training_start"], first_event),
        "first_step": d(first_event, span[0] if span else None),
        "training": d(span[0], span[1]) if span else None,
        "stop_after_last_step": d(span[1] if span else None, m["stop"]),
        "collection": d(m["stop"], m["torn_down"]),   # stop -> collect -> teardown done
        "report": d(m["torn_down"], end),
    }
    wall = end - start
    training = phases["training"] or 0.0
    return {"scenario": Path(scenario).stem, "backend": backend, "verdict": out.result.verdict if out.result else None,
            "wall_s": round(wall, 2), "overhead_s": round(wall - training, 2),
            "overhead_share": round((wall - training) / wall, 3) if wall else None, "phases_s": phases}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*", default=[str(ROOT / "scenarios" / "node_loss.yaml")])
    ap.add_argument("--backend", default="docker", choices=["docker", "local"])
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="cb-harness-bench-") as tmp:
        for sc in a.scenarios:
            for _ in range(a.reps):
                rows.append(one_run(sc, a.backend, Path(tmp)))
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    names = list(rows[0]["phases_s"]) if rows else []
    print(f"{'scenario':24} {'verdict':8} {'wall':>6} {'overhead':>9} " + " ".join(f"{n:>12}" for n in names))
    for r in rows:
        print(f"{r['scenario']:24} {str(r['verdict']):8} {r['wall_s']:6.1f} "
              f"{r['overhead_s']:5.1f} ({r['overhead_share']:.0%}) " +
              " ".join(f"{'-' if v is None else f'{v:.2f}':>12}" for v in r["phases_s"].values()))
    if len(rows) > 1:
        print(f"median wall {statistics.median(r['wall_s'] for r in rows):.1f} s, "
              f"median overhead {statistics.median(r['overhead_s'] for r in rows):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
