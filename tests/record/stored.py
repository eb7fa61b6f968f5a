"""Copies of stored real runs to alter, and their verdict as `chaosbench recheck` would give it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from chaosbench.checks import evaluate
from chaosbench.checks.history import History
from chaosbench.scenario.loader import parse_scenario

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = sorted([*(ROOT / "diagnosis" / "data").iterdir(), *(ROOT / "checks" / "data").iterdir()])
NODE_LOSS = ROOT / "diagnosis" / "data" / "node_loss_plain"   # local backend, kill_node f1, passed
BYO_HUNG = ROOT / "checks" / "data" / "byo_hung_rank_defaults"   # docker, freeze_worker f1, no result.json


def copy_run(tmp_path: Path, src: Path = NODE_LOSS) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def judged(run: Path) -> tuple[History, dict]:
    """The loaded record and its check results by name, under its stored scenario's expectations."""
    try:
        data = yaml.safe_load((run / "scenario.yaml").read_text())
    except (OSError, yaml.YAMLError):
        data = None
    if not isinstance(data, dict):   # a broken scenario.yaml: judge under the original's expectations
        data = yaml.safe_load((NODE_LOSS / "scenario.yaml").read_text())
    data["cluster"]["backend"] = "auto"
    h = History.load(run)
    _, results = evaluate(h, parse_scenario(data, source="scenario.yaml").expect)
    return h, {r.name: r for r in results}


def harness(run: Path, **changes) -> None:
    data = json.loads((run / "harness.json").read_text())
    data.update(changes)
    (run / "harness.json").write_text(json.dumps({k: v for k, v in data.items() if v is not None}))


def events_file(run: Path) -> Path:
    return run / "events" / "events-node-0-local0-observed.jsonl"


def parts(h: History) -> list[str]:
    return [p.part for p in h.integrity]
