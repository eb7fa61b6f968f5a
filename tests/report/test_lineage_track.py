"""The report's lineage track (result.json `lineage`, docs/result.md): per rank, each incarnation's steps as
a bar, each restore as an edge back, each fault at the world step it hit; shown only where a restart happened."""
import json
import shutil
from pathlib import Path

import pytest

from chaosbench.recheck import recheck
from chaosbench.report.lineage import build_lineage

from .htmltext import Page

pytestmark = pytest.mark.timeout(120)
DATA = Path(__file__).resolve().parents[1] / "diagnosis" / "data"
T0 = 1000.0


def _inc(start, end, first, last, restore=None, ended="exit"):
    return {"node": "node-0", "local_rank": 0, "pid": 7, "round": 0, "start": start, "end": end,
            "first_step": first, "last_step": last, "restore": restore, "ended": ended}


def _lineage(second_restore):
    fresh = {"kind": "fresh", "tier": "none", "step": 0}
    return {"ranks": {"1": [_inc(T0, T0 + 10, 1, 42, fresh), _inc(T0 + 12, T0 + 30, 41, 120, second_restore)],
                      "0": [_inc(T0, T0 + 10, 1, 42, fresh), _inc(T0 + 12, T0 + 30, 41, 120, second_restore)]},
            "world": [{"round": 0, "first_step": 1, "last_step": 42, "start": T0 + 1, "end": T0 + 9.2},
                      {"round": 1, "first_step": 41, "last_step": 120, "start": T0 + 13, "end": T0 + 30}]}


RESULT = {"faults": [{"id": "f1", "type": "kill_node", "target": "node-2", "injected_at": T0 + 9.5}]}


def test_incarnations_are_bars_restores_edges_back_and_faults_marked():
    track = build_lineage(_lineage({"kind": "loaded", "tier": "memory", "step": 40, "fault_id": "f1"}), RESULT, T0)
    assert [lane[0] for lane in track.lanes] == ["rank 0", "rank 1"]
    assert len(track.bars) == 4 and len(track.edges) == 2
    first, second = track.bars[0], track.bars[1]
    assert second.x < first.x + first.w            # the restored incarnation starts back at step 40
    assert second.x == pytest.approx(92 + 40 / 120 * (1100 - 92 - 24), abs=0.01)
    assert track.edges[0].label == "↺ memory @ 40" and not track.edges[0].bad
    assert "2 steps back" in track.edges[0].title
    (mark,) = track.faults
    assert mark.label == "f1" and "world step 42" in mark.title


def test_a_restart_without_restore_or_from_scratch_is_drawn_as_a_problem():
    track = build_lineage(_lineage(None), RESULT, T0)
    assert all(e.bad and e.label == "↺ no restore" for e in track.edges)
    track = build_lineage(_lineage({"kind": "fresh", "tier": "none", "step": 0}), RESULT, T0)
    assert all(e.bad and e.label == "↺ fresh start" for e in track.edges)


def test_no_track_without_a_restart_or_without_a_lineage():
    one = {"ranks": {"0": [_inc(T0, T0 + 10, 1, 42)]}, "world": []}
    assert build_lineage(one, RESULT, T0) is None
    assert build_lineage(None, RESULT, T0) is None
    assert build_lineage({"ranks": "garbage"}, RESULT, T0) is None


def test_a_recorded_run_with_a_restart_shows_its_track(tmp_path):
    d = Path(shutil.copytree(DATA / "worker_error", tmp_path / "run"))
    recheck(d)
    lineage = json.loads((d / "result.json").read_text())["lineage"]
    assert sorted(lineage["ranks"]) == ["0", "1"] and all(len(v) == 2 for v in lineage["ranks"].values())
    page = Page((d / "report.html").read_text())
    assert "Lineage: steps per rank" in page.all_text() and "↺ memory @ 30" in page.all_text()
