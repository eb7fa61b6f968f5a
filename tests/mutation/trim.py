"""Store a recorded run as a mutation fixture (tests/mutation/data/NAME/):
python -m tests.mutation.trim reports/<run-id> NAME. Keeps what diagnosis fixtures keep
(tests/diagnosis/trim.py: events, fault log, harness record, exits, inventories, scenario, result)
plus the receipts, and only the part of each node log a check can ask for: its first and last lines
and every line a `log_regex` pattern matches. Refuses a run whose stored verdict is not `passed`:
the suite needs runs that pass unmutated."""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import yaml

from tests.diagnosis.trim import trim as trim_for_diagnosis

LOG_LINES = 150   # first and last lines of each node log kept


def trim(src: Path, dst: Path) -> int:
    verdict = json.loads((src / "result.json").read_text()).get("verdict")
    if verdict != "passed":
        raise SystemExit(f"{src}: stored verdict {verdict!r}; a mutation fixture must be a run that passed")
    trim_for_diagnosis(src, dst)
    if (src / "received.jsonl").is_file():
        shutil.copy2(src / "received.jsonl", dst / "received.jsonl")
    expect = (yaml.safe_load((src / "scenario.yaml").read_text()) or {}).get("expect") or {}
    patterns = [re.compile(p["pattern"] if isinstance(p, dict) else p) for p in expect.get("log_regex") or []]
    for log in sorted((dst / "logs").glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        kept = [x for i, x in enumerate(lines)
                if i < LOG_LINES or i >= len(lines) - LOG_LINES or any(p.search(x) for p in patterns)]
        log.write_text("\n".join(kept) + "\n")
    return sum(f.stat().st_size for f in dst.rglob("*") if f.is_file())


if __name__ == "__main__":
    size = trim(Path(sys.argv[1]), Path(__file__).parent / "data" / sys.argv[2])
    print(f"{sys.argv[2]}: {size // 1024} KiB")
