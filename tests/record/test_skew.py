"""Clock skew: unknown without receipts (said, and a pass by less than the uncertainty is not
evaluated); below the 2-s threshold corrected where the receipts measure it."""
import json

import pytest

from chaosbench.checks.base import passed
from chaosbench.checks.history import History
from chaosbench.checks.recovery import recoveries
from chaosbench.observer.received import RECEIPTS, THRESHOLD_S, corrected_ts
from tests.checks.synth import node_loss
from tests.checks.test_clock_skew_timeline import POLL_S, fields, without_then_with_receipts, write_run

from .stored import copy_run, harness, judged


def test_no_receipts_on_one_host_clock_is_said_but_bounded(tmp_path):
    h, res = judged(copy_run(tmp_path))   # local backend, no clock fault, a record older than receipts
    assert not h.skew.known and h.skew.worst_s == 0.0
    assert "clock skew unknown" in h.timing_caveat()
    r = res["max_recovery_seconds"]
    assert r.status == "passed" and "clock skew unknown" in r.reason


def test_no_receipts_across_hosts_turns_a_timing_pass_into_not_evaluated(tmp_path):
    run = copy_run(tmp_path)
    (run / "scenario.yaml").write_text((run / "scenario.yaml").read_text().replace("backend: local", "backend: slurm"))
    h, res = judged(run)
    assert h.skew.worst_s is None
    r = res["max_recovery_seconds"]
    assert r.status == "not_evaluated" and "unbounded clock-skew uncertainty" in r.reason
    assert res["fault:f1"].status == "not_evaluated"


def test_a_pass_inside_the_measured_uncertainty_is_not_evaluated():
    h = History()
    h.skew.bound_s = {"node-0": 0.3}
    assert h.timed(passed("t", "<= 10", 9.8, "why"), 0.2).status == "not_evaluated"
    assert h.timed(passed("t", "<= 10", 9.5, "why"), 0.5).status == "passed"


@pytest.mark.parametrize("skew_s", [1.9, -1.9])
def test_a_skew_just_under_the_threshold_is_corrected(tmp_path, skew_s):
    """The recovering survivor's clock is off by 1.9 s through the fault and its recovery: uncorrected,
    its stamps move the recovery by that much."""
    assert abs(skew_s) < THRESHOLD_S
    truth = [fields(r) for r in recoveries(node_loss())]
    run = write_run(tmp_path, skew_s, skew_from=0.0, skew_to=1e9)
    h = without_then_with_receipts(run, truth)
    got = [fields(r) for r in recoveries(h)]
    assert all(a == pytest.approx(b, abs=POLL_S + 0.05) for a, b in zip(got, truth))
    assert h.clock_skew["node-1"]["corrected"] > 0 and h.clock_skew["node-0"]["corrected"] == 0
    assert h.skew.known and h.skew.worst_s <= POLL_S + 0.05


def test_without_skew_nothing_moves_and_the_uncertainty_is_a_poll(tmp_path):
    h = History.load(write_run(tmp_path, 0.0))
    assert all("ts_node" not in e for e in h.events)
    assert h.skew.known and h.skew.worst_s <= POLL_S and h.timing_caveat() is None


def test_the_rule_below_the_threshold():
    assert corrected_ts(1.85, 1.9) == 1.9                  # stamped in the harness's future: ahead
    assert corrected_ts(-2.0, -1.9, hi=-1.6) == -1.9       # behind by more than the read delay explains
    assert corrected_ts(-2.0, -1.9, hi=0.1) is None        # a poll that came late: no skew measured
    assert corrected_ts(-0.1, -0.05, hi=0.2) is None       # read late, no skew


def test_a_versioned_record_without_receipts_is_not_whole(tmp_path):
    """Since records carry a schema version the live tail's receipts are in every run directory: gone,
    the skew cannot be measured, and that is said as a missing part (an old record only notes it)."""
    run = copy_run(tmp_path)
    h, _ = judged(run)
    assert h.integrity == [] and any(RECEIPTS in u for u in h.unjudged)
    harness(run, schema_version=1, run_id=json.loads((run / "result.json").read_text())["run_id"])
    h, res = judged(run)
    assert [p.part for p in h.integrity] == [RECEIPTS] and not h.skew.known
    assert res["record_integrity"].status == "failed"
