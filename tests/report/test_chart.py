import pytest

from chaosbench.report.chart import build_chart, nice_ticks
from chaosbench.report.timeline import timeline_of
from chaosbench.report.view import headline

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("lo,hi,expected", [(0, 37.1, [0, 10, 20, 30]),
                                            (0, 120, [0, 20, 40, 60, 80, 100, 120]),
                                            (0, 1, [0, 0.2, 0.4, 0.6, 0.8, 1.0])])
def test_nice_ticks(lo, hi, expected):
    assert nice_ticks(lo, hi) == pytest.approx(expected)


def _flapping(n_faults):
    t0 = 1000.0
    faults = [{"id": f"f{i}", "type": "kill_node", "target": "node-1", "injected_at": t0 + 10 * i,
               "healed_at": None} for i in range(1, n_faults + 1)]
    recs = [{"fault_id": f["id"], "tier": "memory", "restored_step": 5 * i, "total_s": 2.0 + i,
             "lost_steps": 1, "first_step_at": f["injected_at"] + 2.0} for i, f in enumerate(faults, 1)]
    steps = [{"ts": t0 + s, "node": "node-0", "rank": 0, "step": s, "restart_count": s // 10} for s in range(1, 100)]
    result = {"started_at": t0, "finished_at": t0 + 100, "faults": faults, "recoveries": recs,
              "timeline": {"steps": steps}}
    return result, [{"rec": r, "fault": f} for r, f in zip(recs, faults)]


def test_restarts_split_a_series_and_faults_get_windows():
    result, _ = _flapping(2)
    chart = build_chart(result, timeline_of(result))
    assert len(chart.series) == 1 and len(chart.series[0].segments) == 10  # restart_count 0..9
    assert [f.label for f in chart.faults] == ["f1 kill_node node-1", "f2 kill_node node-1"]
    assert chart.faults[0].recovery_label == "↺ memory @ step 5 · 3.0 s"
    assert chart.faults[0].w == pytest.approx(2.0 / 100 * (1100 - 92 - 24), abs=0.1)


def test_many_faults_use_short_labels_and_a_summary_headline():
    result, rows = _flapping(6)
    chart = build_chart(result, timeline_of(result))
    assert [f.label for f in chart.faults] == [f"f{i}" for i in range(1, 7)]
    assert all(f.recovery_label == "" for f in chart.faults)
    assert "f6 kill_node node-1: injected t+60.0s" in chart.faults[-1].title
    assert headline(result, rows) == ["6 recoveries: memory ×6; recovery median 6.0 s, worst 8.0 s; "
                                      "6 steps lost in total."]


def test_recovery_phases_strip_and_one_restart_line_per_round():
    result, _ = _flapping(1)
    rec = result["recoveries"][0]
    t = result["faults"][0]["injected_at"]
    rec.update(injected_at=t, detected_at=t + 0.5, rendezvous_done_at=t + 1.5, restored_at=t + 1.7,
               first_step_at=t + 2.0)
    result["timeline"]["restarts"] = [{"ts": t + 1.0, "node": n, "restart_count": 1} for n in ("node-0", "node-1")]
    chart = build_chart(result, timeline_of(result))
    assert [p.phase for p in chart.phases] == ["detection", "rendezvous", "restore", "first"]
    assert chart.phases[1].title == "f1 rendezvous: 1.00 s"
    assert len(chart.restarts) == 2 and len(chart.restart_lines) == 1
