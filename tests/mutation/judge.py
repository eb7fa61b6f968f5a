"""Judge a run directory the way `chaosbench recheck` does, in process: History.load, evaluate, and
the verdict rule of chaosbench/recheck.py."""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from chaosbench.checks import evaluate
from chaosbench.checks.history import History
try:   # the one analyse step shared by run and recheck holds the verdict rule
    from chaosbench.analyse import verdict_of
except ImportError:   # before it existed: recheck's own
    from chaosbench.recheck import verdict_of
from chaosbench.scenario.loader import parse_scenario

DATA = Path(__file__).parent / "data"


@dataclass
class Judgement:
    verdict: str
    passed: list[str]      # the checks that passed (or did not block)
    blocking: list[str]    # the checks that failed the run, with their reasons


@lru_cache(maxsize=None)
def _expect(scenario_text: str, source: str):
    data = yaml.safe_load(scenario_text)
    if isinstance(data.get("cluster"), dict):
        data["cluster"]["backend"] = "auto"   # as recheck: the checks do not depend on it
    return parse_scenario(data, source=source).expect


def judge(run_dir: Path, original: Path) -> Judgement:
    """The verdict on run_dir. The scenario and the harness error come from the unmutated run: an
    operator rewrites the record, never what was asked of it."""
    expect = _expect((original / "scenario.yaml").read_text(), str(original / "scenario.yaml"))
    stored = original / "result.json"   # absent only in a record kept before result.json was stored
    error = json.loads(stored.read_text()).get("error") if stored.is_file() else None
    _, checks = evaluate(History.load(run_dir), expect)
    return Judgement(verdict_of(checks, error),
                     [c.name for c in checks if not c.blocking],
                     [f"{c.name}: {c.status}: {c.reason}" for c in checks if c.blocking])


def runs() -> dict[str, Path]:
    """The stored real runs, by name (tests/mutation/data/<name>/, each a trimmed run directory)."""
    return {p.name: p for p in sorted(DATA.iterdir()) if (p / "scenario.yaml").is_file()}
