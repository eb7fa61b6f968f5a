"""The side-by-side table of docs/gray-failures.md: each gray-failure story on the reference trainer
and on a plain DDP job with default settings, in one command.

    python bench/gray_failures.py [--stories hung_rank,gil_hang,...] [--backend docker] [--out DIR]

For each story it runs scenarios/<story>.yaml as is (the reference trainer with the settings the
docs describe), then the same faults and expectations on examples/byo_ddp/train_instrumented.py
with what a job gets when it sets nothing: gloo's 30-minute collective timeout (--pg-timeout 1800),
torchrun's own rendezvous timeouts, no warm start; a run that hangs ends `stuck` after 90 s without
a step. It prints one row per run, read from each run's result.json (nothing is computed here that
the checks did not say): verdict, how the run ended, detection, recovery time, restore tier and
step, lost steps, wall time, and the first failing check's reason.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chaosbench.runner import RunOptions, run_scenario   # noqa: E402

STORIES = ["hung_rank", "straggler", "preemption", "worker_error", "gil_hang", "silent_corruption", "oom_worker"]
BYO = ROOT / "examples" / "byo_ddp"


def defaults_variant(story: Path, out: Path) -> Path:
    """The story's faults and expectations on the plain instrumented job with default settings."""
    s = yaml.safe_load(story.read_text())
    cluster = {k: v for k, v in s["cluster"].items() if k not in ("rdzv_timeouts", "env")}
    cluster["elastic"] = {k: v for k, v in cluster.get("elastic", {}).items() if k != "max_restarts"} | {"max_restarts": 3}
    steps = int((s.get("trainer", {}).get("overrides") or {}).get("training.max_steps", 200))
    variant = {
        "name": f"{s['name']}_defaults",
        "description": f"{s['name']} on the plain job with default settings",
        "cluster": cluster,
        "trainer": {"workdir": str(BYO), "script": "train_instrumented.py",
                    "args": ["--steps", str(steps), "--step-time", "0.1", "--pg-timeout", "1800"]},
        "faults": s["faults"],
        "expect": s["expect"],
        "run": {"timeout_s": 240, "stuck_after_s": 90},   # torchrun's default rendezvous takes ~45 s to recover
    }
    path = out / f"{variant['name']}.yaml"
    path.write_text(yaml.safe_dump(variant, sort_keys=False))
    return path


def _check(result: dict, prefix: str) -> dict | None:
    return next((c for c in result.get("checks", []) if c["name"] == prefix or c["name"].startswith(prefix + ":")),
                None)


def _said(c: dict | None) -> str:
    if c is None:
        return "not asked"
    if c["status"] == "passed":
        return str(c.get("observed"))
    return f"{c['status']}: {c.get('reason') or c.get('observed')}"[:140]


def row(story: str, job: str, run_dir: Path | None, wall: float) -> dict:
    result = json.loads((run_dir / "result.json").read_text()) if run_dir and (run_dir / "result.json").exists() else {}
    failing = [c for c in result.get("checks", []) if c["status"] != "passed"]
    rec = (result.get("recoveries") or [{}])[0] if result.get("recoveries") else {}
    return {
        "story": story, "job": job, "verdict": result.get("verdict", "no result"),
        "ending": result.get("ending"),
        "detection": _said(_check(result, "max_detection_seconds")),
        "recovery_s": rec.get("total_s"),
        "restore": f"{rec.get('tier')} step {rec.get('restored_step')}" if rec.get("tier") else "-",
        "lost_steps": rec.get("lost_steps"),
        "wall_s": round(wall, 1),
        "first_failure": f"{failing[0]['name']}: {failing[0].get('reason', '')}"[:160] if failing else
                         (result.get("error") or ""),
        "run_dir": str(run_dir) if run_dir else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stories", default=",".join(STORIES))
    ap.add_argument("--backend", default="docker")
    ap.add_argument("--jobs", default="reference,defaults", help="which of the two to run")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--table-only", action="store_true", help="print the table of an earlier --out, run nothing")
    a = ap.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="cb-gray-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    if a.table_only:
        rows = [row(r["story"], r["job"], Path(r["run_dir"]) if r["run_dir"] else None, r["wall_s"])
                for r in json.loads((out / "gray_failures.json").read_text())]
    for story in [] if a.table_only else [s.strip() for s in a.stories.split(",") if s.strip()]:
        path = ROOT / "scenarios" / f"{story}.yaml"
        for job in a.jobs.split(","):
            scenario = path if job == "reference" else defaults_variant(path, out)
            print(f"# {story} / {job}: {scenario}", flush=True)
            t0 = time.monotonic()
            outcome = run_scenario(scenario, RunOptions(backend=a.backend, report_dir=out / "reports"))
            rows.append(row(story, job, outcome.run_dir, time.monotonic() - t0))
            print("#   " + json.dumps(rows[-1]), flush=True)
    (out / "gray_failures.json").write_text(json.dumps(rows, indent=1))
    cols = ["story", "job", "verdict", "ending", "detection", "recovery_s", "restore", "lost_steps", "wall_s",
            "first_failure"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    print(f"# raw: {out / 'gray_failures.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
