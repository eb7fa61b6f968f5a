"""The one analyse step (chaosbench/analyse.py) that `chaosbench run` and `chaosbench recheck` share:
events parsed once (History.load), the root cause found once, each file written once."""
import json
import shutil
import sys
import traceback
from pathlib import Path

import pytest

import chaosbench.analyse as analyse_mod
from chaosbench.analyse import analyse
from chaosbench.recheck import recheck
from chaosbench.result import RunResult
from chaosbench.scenario.loader import parse_scenario

pytestmark = pytest.mark.timeout(120)
DATA = Path(__file__).resolve().parents[1] / "diagnosis" / "data"


def _copy(tmp_path, name):
    return Path(shutil.copytree(DATA / name, tmp_path / name))


def _expect(d):
    import yaml
    data = yaml.safe_load((d / "scenario.yaml").read_text())
    data["cluster"]["backend"] = "auto"
    return parse_scenario(data, source="scenario.yaml").expect


def test_the_run_writes_the_root_cause_into_its_harness_record_once(tmp_path, monkeypatch):
    d = _copy(tmp_path, "missing_dir")
    harness = json.loads((d / "harness.json").read_text())
    harness["stop_reason"] = harness["stop_reason"].split("; ")[0]
    harness.pop("root_cause", None)
    (d / "harness.json").write_text(json.dumps(harness))
    calls = []
    real = analyse_mod.root_cause
    monkeypatch.setattr(analyse_mod, "root_cause", lambda rec: calls.append(1) or real(rec))
    import chaosbench.diagnosis as diagnosis
    monkeypatch.setattr(diagnosis, "root_cause", lambda rec: pytest.fail("diagnosis found the root cause again"))
    old = RunResult.read(d)
    a = analyse(d, _expect(d), lambda h: old, say=lambda m: None, record_stop=True)
    assert calls == [1]
    stored = json.loads((d / "harness.json").read_text())
    assert "root cause: node-" in stored["stop_reason"] and stored["root_cause"]["repeats"] >= 3
    assert a.result.stop_reason == stored["stop_reason"]
    assert json.loads((d / "diagnosis.json").read_text())["root_cause"]["summary"] in stored["stop_reason"]
    before = (d / "harness.json").read_text()
    recheck(d)   # a recheck leaves the harness record as the run left it
    assert (d / "harness.json").read_text() == before


def test_events_are_parsed_once_per_analysis(tmp_path):
    """Only History.load parses an events file; the report reads it as text for its viewer, nothing else opens it."""
    d = _copy(tmp_path, "worker_error")
    who, watched = [], [str(d / "events") + "/"]

    def hook(ev, args):
        if ev == "open" and watched and isinstance(args[0], str) and args[0].startswith(watched[0]):
            who.append([f.filename for f in traceback.extract_stack() if "/chaosbench/" in f.filename])
    sys.addaudithook(hook)   # stays installed for the process: emptied below so it matches nothing
    try:
        recheck(d)
    finally:
        watched.clear()
    files = 2
    parsers = [s for s in who if any(f.endswith("checks/history.py") for f in s)]
    viewers = [s for s in who if any(f.endswith("report/load.py") for f in s)]
    assert len(parsers) == files and len(viewers) == files and len(who) == 2 * files, who


def test_dry_run_writes_nothing(tmp_path):
    d = _copy(tmp_path, "worker_error")
    before = {p.name: p.stat().st_mtime_ns for p in d.iterdir()}
    recheck(d, write=False)
    assert {p.name: p.stat().st_mtime_ns for p in d.iterdir()} == before
