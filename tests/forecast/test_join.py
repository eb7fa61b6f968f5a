"""The replacement's join round (a second restart per lost node) and the measured speed between failures."""
from __future__ import annotations

import math

import pytest

from chaosbench.forecast import ForecastError
from chaosbench.forecast.inputs import load_runs
from chaosbench.forecast.plan import build
from chaosbench.forecast.presets import Cause, FailureModel
from chaosbench.forecast.sim import simulate
from chaosbench.forecast.validate import steady_rate

from .synth import make_result, write_run

ONE_PER_NODE_HOUR = FailureModel("x", "x", [Cause("c", "node_loss", per_node_day=24.0)])


def _goodput(tmp_path, name: str, result: dict, **kw) -> float:
    plan = build(load_runs([write_run(tmp_path, name, result)]), ONE_PER_NODE_HOUR, 3, 1, 2.0,
                 {"memory": 1e-3, "nvme": math.inf, "s3": math.inf}, trajectories=400, seed=1, **kw)
    plan.spec.stall_s["memory"] = 0.0
    return float(simulate(plan.spec, {t: [v] for t, v in plan.intervals.items()}).goodput.mean())


def test_a_join_round_is_its_own_phase_not_also_degraded_time(tmp_path):
    # survivors resume on 2 nodes; 5 s later the newcomer's join pauses everyone 3 s and redoes 4 steps
    m = load_runs([write_run(tmp_path, "a", make_result(join=(5.0, 3.0, 4)))])
    r = m.rows[0]
    assert m.joins == 1
    assert r.phases["join"] == pytest.approx(3.0 - 0.1 + 4 / 10)     # pause beyond one step + 4 redone steps
    assert r.phases["degraded"] == pytest.approx(0.0, abs=0.15)      # not counted twice
    assert r.total_s == pytest.approx(0.95 + 3.3, abs=0.15)


def test_no_join_when_the_replacement_made_the_round_or_came_after_the_next_fault(tmp_path):
    same_round = make_result(slow_after_s=3.0)           # world size after == before: a pause is degraded time
    m = load_runs([write_run(tmp_path, "a", same_round)])
    assert m.joins == 0 and m.rows[0].phases["join"] == 0.0
    assert m.rows[0].phases["degraded"] == pytest.approx(3.0, abs=0.15)
    late = make_result(join=(12.0, 3.0, 0), second_fault_at=18.0)    # back at full size only after the 2nd fault
    m = load_runs([write_run(tmp_path, "b", late)])
    assert m.joins == 0 and m.rows[0].phases["join"] == 0.0


def test_a_join_lowers_the_forecast_by_its_measured_cost(tmp_path):
    """Renewal theory with a fixed cost R per failure: goodput = 1 / (1 + lam R); the join adds to R."""
    lam = 3 / 3600
    without = _goodput(tmp_path, "plain", make_result(phases=(0, 0, 60.0, 0)))
    assert without == pytest.approx(1 / (1 + lam * 60), abs=0.002)          # unchanged by the join phase
    joined = _goodput(tmp_path, "join", make_result(phases=(0, 0, 60.0, 0), join=(5.0, 30.1, 0)))
    assert joined == pytest.approx(1 / (1 + lam * 90), abs=0.002)           # + a 30 s join round
    assert without - joined == pytest.approx(1 / (1 + lam * 60) - 1 / (1 + lam * 90), abs=0.002)


def test_speed_between_failures_scales_the_forecast_and_is_stated(tmp_path):
    lam = 3 / 3600
    res = make_result(phases=(0, 0, 60.0, 0))
    assert _goodput(tmp_path, "s", res, speed=0.9) == pytest.approx(0.9 / (1 + lam * 60), abs=0.002)
    plan = build(load_runs([write_run(tmp_path, "t", res)]), ONE_PER_NODE_HOUR, 3, 1, 1, speed=0.9,
                 speed_source="18 / 20 steps/s")
    assert any("x0.900" in a and "18 / 20 steps/s" in a for a in plan.assumptions)
    assert not any("speed between failures" in a for a in build(plan.measured, ONE_PER_NODE_HOUR, 3, 1, 1).assumptions)
    with pytest.raises(ForecastError, match="speed between failures must be > 0"):
        build(plan.measured, ONE_PER_NODE_HOUR, 3, 1, 1, speed=0.0)


def test_steady_rate_leaves_out_recoveries_and_join_rounds():
    # 10 steps/s, except the recovery (0.95 s) and the 3 s join pause, which the stretches skip
    res = make_result(join=(5.0, 3.0, 0))
    steps = res["timeline"]["steps"]
    t_back = next(s["ts"] for s in steps if s["ts"] > 10 and s["world_size"] == 3)
    rate, secs = steady_rate(res, window_s=60.0)          # the window: 30 s before the fault to 40 s
    assert rate == pytest.approx(10.0, rel=0.02)
    assert secs == pytest.approx((10.0 - 0.1) + (40.0 - t_back))    # first step..fault, join end..window end
    # a job whose steps slowed to half speed after the join: the stretch says so
    for s in steps:
        if s["ts"] >= t_back:
            s["ts"] = t_back + 2 * (s["ts"] - t_back)
    rate2, _ = steady_rate(res, window_s=60.0)
    assert rate2 < 0.8 * rate
    assert steady_rate({**res, "faults": []}, 60.0) is None
