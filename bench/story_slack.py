"""How long each story trains after its last fault has settled: the part of a chaos suite's wall
time that a smaller `reaches_step` could give back. Reads finished runs' result.json, runs nothing.

    python bench/story_slack.py reports/            # every run under it (newest per scenario)
    python bench/story_slack.py reports/node_join-2026*  # named run directories

A fault settles at the latest of its injection, its heal and its recovery's first step (a rejoin
after a heal is a restart round, not a recovery record: such a story settles at the heal). The
table gives, per scenario: wall time, the training span, the seconds trained before the first fault
was injected, the step and time at which the last fault settled, the step the run ended at, and the seconds and share of wall time trained after that.
Trimming is a judgement per story (a check may need steps after the heal: stalls, replicas agreeing
at a later snapshot, the world size after a rejoin); this only says where the time is.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chaosbench.report.errors import ReportInputError   # noqa: E402
from chaosbench.report.load import load_result          # noqa: E402  (the report's own reader and checks)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def settled_at(result: dict) -> float | None:
    """The latest settle time over every fault (see module doc); None for a run without faults."""
    recs: dict = {}
    for rec in result.get("recoveries") or []:
        if _num(rec.get("first_step_at")):
            recs[rec.get("fault_id")] = max(recs.get(rec.get("fault_id"), 0.0), rec["first_step_at"])
    times = list(recs.values())   # a recovery without a fault row settles too
    for f in result.get("faults") or []:
        marks = [t for t in (f.get("injected_at"), f.get("healed_at"), recs.get(f.get("id"))) if _num(t)]
        if marks:
            times.append(max(marks))
    return max(times) if times else None


def slack(result: dict) -> dict:
    steps = [s for s in (result.get("timeline") or {}).get("steps") or [] if _num(s.get("ts"))]
    row = {"scenario": (result.get("scenario") or {}).get("name"), "verdict": result.get("verdict"),
           "wall_s": result.get("duration_s")}
    if not steps:
        return row | {"error": "no training steps in the timeline"}
    steps.sort(key=lambda s: s["ts"])
    first, last = steps[0], steps[-1]
    at = settled_at(result)
    row |= {"training_s": round(last["ts"] - first["ts"], 1), "end_step": max(s["step"] for s in steps)}
    if at is None:
        return row | {"error": "no fault injected"}
    injected = [f["injected_at"] for f in result.get("faults") or [] if _num(f.get("injected_at"))]
    if injected:   # training before the first fault: what an earlier fault step could give back
        row["before_s"] = round(max(0.0, min(injected) - first["ts"]), 1)
    before = [s["step"] for s in steps if s["ts"] <= at]
    row |= {"settled_step": max(before) if before else 0, "after_s": round(max(0.0, last["ts"] - at), 1)}
    if _num(row["wall_s"]) and row["wall_s"] > 0:
        row["after_pct"] = round(100 * row["after_s"] / row["wall_s"])
    return row


def newest_runs(paths: list[Path]) -> list[Path]:
    """result.json files: the newest run per scenario under each directory given."""
    found: dict[str, Path] = {}
    for p in paths:
        files = [p / "result.json"] if (p / "result.json").is_file() else sorted(p.glob("*/result.json"))
        for f in files:
            name = f.parent.name.rsplit("-", 3)[0]
            if name not in found or f.parent.name > found[name].parent.name:
                found[name] = f
    return sorted(found.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="reports directory or run directories")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for f in newest_runs(args.paths):
        try:
            rows.append(slack(load_result(f.parent)))
        except ReportInputError as e:
            rows.append({"scenario": f.parent.name, "error": str(e)})
    if not rows:
        print("no result.json found under " + ", ".join(map(str, args.paths)), file=sys.stderr)
        return 2
    rows.sort(key=lambda r: -(r.get("after_s") or 0))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    cols = ("scenario", "verdict", "wall_s", "training_s", "before_s", "settled_step", "end_step", "after_s",
            "after_pct")
    print("  ".join(f"{c:>12}" for c in cols))
    for r in rows:
        print("  ".join(f"{str(r.get(c, '-')):>12}" for c in cols) + (f"  ({r['error']})" if "error" in r else ""))
    total = sum(r.get("after_s") or 0 for r in rows)
    print(f"trained after the last fault settled: {total:.0f} s in all, over {len(rows)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
