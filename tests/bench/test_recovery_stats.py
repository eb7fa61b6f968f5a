"""bench/recovery_stats.py: a run directory -> breakdown, medians, ratios, table. No timing."""
import json
from pathlib import Path

import pytest

from .loader import import_bench


@pytest.fixture(scope="module")
def stats():
    yield from import_bench("recovery_stats")


def _ev(ts, event, node="node-0", pid=1, ws=2, **kw):
    return {"ts": ts, "event": event, "node": node, "rank": 0, "local_rank": 0, "world_size": ws,
            "restart_count": 0, "pid": pid, "run_id": "r", **kw}


def _write_run(d: Path, events: list[dict], fault_ts: float | None = 100.0) -> Path:
    (d / "events").mkdir(parents=True)
    with open(d / "events" / "events-node-0-local0.jsonl", "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")
        f.write('{"ts": 200, "event": "st')    # a killed writer's torn last line is ignored
    if fault_ts is not None:
        (d / "faults.jsonl").write_text(json.dumps({"ts": fault_ts, "id": "f1", "fault": "kill_node",
                                                    "action": "inject", "target": "node-1", "params": {}}) + "\n")
    return d


def _recovering_run(d: Path) -> Path:
    old = [_ev(90.0 + s, "step", step=s) for s in range(1, 9)]          # steps 1..8 at t=91..98
    new = [_ev(101.0, "phase", pid=2, ws=1, phase="config"),            # detection 100.5, new worker 101
           _ev(103.0, "checkpoint_loaded", pid=2, ws=1, tier="memory", step=5, source="local",
               duration_s=0.1, checksum_ok=True, bytes=10),
           _ev(103.5, "step", pid=2, ws=1, step=6)]
    late = [_ev(100.2, "step", step=9)]   # completed between the fault record and the kill landing
    return _write_run(d, old + late + [_ev(100.5, "fatal", error="Connection closed by peer")] + new)


def test_measure_breakdown_and_lost_work(stats, tmp_path):
    rep = stats.measure(_recovering_run(tmp_path), "tuned trainer, kill", rdzv="c10d", load=3.0)
    assert (rep.detection_s, rep.rendezvous_s, rep.restore_s, rep.first_step_s, rep.total_s) == \
        (0.5, 0.5, 2.0, 0.5, 3.5)
    assert rep.lost_steps == 4 and rep.lost_s == 5.2 and rep.tier == "memory"   # steps 6..9 redone


def test_measure_not_recovered_keeps_detection(stats, tmp_path):
    events = [_ev(95.0, "step", step=1), _ev(103.0, "health_check_failed", error="timeout", timeout_s=3)]
    rep = stats.measure(_write_run(tmp_path, events), "tuned trainer, pause", note="bound hit")
    assert rep.total_s is None and rep.detection_s == 3.0 and rep.note == "bound hit"


def test_measure_without_fault_says_so(stats, tmp_path):
    rep = stats.measure(_write_run(tmp_path, [_ev(95.0, "step", step=1)], fault_ts=None), "x")
    assert rep.total_s is None and rep.note == "no fault recorded" and not rep.injected


def test_summary_medians_ratio_and_table(stats):
    R = stats.Rep
    stock = [R("stock torchrun+toy, kill", "c10d", True, total_s=t, detection_s=0.1) for t in (17.0, 20.0, 15.0)]
    tuned = [R("tuned trainer, kill", "c10d", total_s=t, lost_steps=n, load=2.5)
             for t, n in ((4.0, 2), (5.0, 4), (None, None))]
    s_stock, s_tuned = stats.summarize(stock), stats.summarize(tuned)
    assert s_stock.med["total_s"] == 17.0 and s_stock.recovered == 3
    assert s_tuned.med["total_s"] == 4.5 and s_tuned.recovered == 2 and s_tuned.lost_steps == 3
    assert stats.ratio(17.0, 4.5) == 3.78 and stats.ratio(None, 4.5) is None and stats.ratio(17.0, 0) is None
    out = stats.table([s_stock, s_tuned], {"c10d": s_stock.med["total_s"]})
    tuned_line = next(line for line in out.splitlines() if line.startswith("tuned"))
    assert "3.78x" in tuned_line and "2/3" in tuned_line and "2.5" in tuned_line
    assert "x" not in next(line for line in out.splitlines() if line.startswith("stock")).split()[-2]


def test_start_failures_are_not_counted_as_failed_recoveries(stats):
    R = stats.Rep
    s = stats.summarize([R("tuned trainer, kill", "etcd-v3", total_s=5.0),
                         R("tuned trainer, kill", "etcd-v3", injected=False, note="start timeout")])
    assert (s.reps, s.recovered, s.start_failures, s.med["total_s"]) == (1, 1, 1, 5.0)
    assert "1 rep(s) broke before the fault" in stats.table([s], {"etcd-v3": 20.0})


def test_summarize_rejects_empty(stats):
    with pytest.raises(ValueError):
        stats.summarize([])
