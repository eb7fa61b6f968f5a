"""The forecast's parts: measured inputs, presets, failure files, the simulator, the optimizer."""
from __future__ import annotations

import math

import numpy as np
import pytest

from chaosbench.forecast import ForecastError
from chaosbench.forecast.failures import failure_model, load_failure_file
from chaosbench.forecast.inputs import load_runs
from chaosbench.forecast.plan import build, parse_intervals
from chaosbench.forecast.presets import LLAMA3_TOTAL, llama3, rsc
from chaosbench.forecast.sim import simulate
from chaosbench.forecast.validate import llama3_case, young_daly_case

from .synth import make_result, write_run


def test_inputs_keep_each_recovery_whole_and_measure_the_degraded_time(tmp_path):
    m = load_runs([write_run(tmp_path, "a", make_result(slow_after_s=3.0)),
                   write_run(tmp_path, "b", make_result("worker_crash"))])
    rows = m.classes()
    assert set(rows) == {"node_loss", "worker_crash"}
    r = rows["node_loss"][0]
    assert r.phases["rendezvous"] == pytest.approx(0.6) and r.phases["restore"] == pytest.approx(0.2)
    assert r.phases["degraded"] == pytest.approx(3.0, abs=0.15)      # 3 s without progress after the first step
    assert rows["worker_crash"][0].phases["degraded"] == pytest.approx(0.0, abs=0.15)
    assert m.restore_tier("node_loss") == "memory"
    assert m.interval_s("memory") == pytest.approx(0.5)              # every 5 steps at 10 steps/s


def test_a_null_phase_keeps_the_total_in_the_next_measured_one(tmp_path):
    res = make_result()
    res["recoveries"][0]["detection_s"] = None
    m = load_runs([write_run(tmp_path, "a", res)])
    assert sum(m.rows[0].phases[p] for p in ("detection", "rendezvous", "restore", "first_step")) == pytest.approx(0.95)


def test_llama3_preset_counts_and_rate():
    assert LLAMA3_TOTAL == 419
    rate = sum(llama3().rates_per_hour(16384, 8).values())
    assert 1 / rate == pytest.approx(54 * 24 / 419)                  # one interruption every ~3.1 h


def test_rsc_preset_goes_through_both_published_mttfs():
    m = rsc()
    assert 1 / sum(m.rates_per_hour(1024, 8).values()) == pytest.approx(7.9)
    assert 1 / sum(m.rates_per_hour(16384, 8).values()) == pytest.approx(1.8)


def test_failure_file_rates_per_node_day_and_per_gpu_hour(tmp_path):
    f = tmp_path / "f.yaml"
    f.write_text("causes:\n  - {name: gpu, class: node_loss, per_gpu_hour: 1.0e-5}\n"
                 "  - {name: sw, class: worker_crash, per_node_day: 0.24}\n")
    rates = load_failure_file(f).rates_per_hour(800, 8)
    assert rates == {"gpu": pytest.approx(0.008), "sw": pytest.approx(1.0)}


@pytest.mark.parametrize("text, where", [
    ("causes:\n  - {name: gpu, class: node_loss, per_gpu_hour: -1}\n", ":2: causes[0].per_gpu_hour: -1 is negative"),
    ("causes:\n  - name: gpu\n    clas: node_loss\n    per_gpu_hour: 1\n", ":3: causes[0].clas: unknown key; did you mean 'class'?"),
    ("causes:\n  - name: gpu\n    class: gpu_loss\n    per_gpu_hour: 1\n", ":3: causes[0].class: 'gpu_loss' is not a fault class"),
    ("causes:\n  - {name: gpu, class: node_loss}\n", ":2: causes[0]: give exactly one rate"),
    ("causes: [\n", ":2: not valid YAML/JSON"),
    ("{\"causes\": [{\"name\": \"x\", \"class\": \"node_loss\",\n \"per_node_day\": \"often\"}]}\n",
     ":2: causes[0].per_node_day: 'often' is not a number"),
])
def test_bad_failure_file_names_file_line_field(tmp_path, text, where):
    f = tmp_path / ("f.json" if text.startswith("{") else "f.yaml")
    f.write_text(text)
    with pytest.raises(ForecastError) as e:
        failure_model(str(f))
    assert f"{f}{where}" in str(e.value)


def test_unknown_preset_and_bad_interval():
    with pytest.raises(ForecastError, match="unknown preset 'llama'; did you mean 'llama3-405b'"):
        failure_model("llama")
    assert parse_intervals("memory=30s,nvme=10m,s3=1h") == {"memory": 30, "nvme": 600, "s3": 3600}
    with pytest.raises(ForecastError, match="not TIER=DURATION"):
        parse_intervals("disk=1h")


def test_a_class_without_a_measured_run_names_the_scenario(tmp_path):
    m = load_runs([write_run(tmp_path, "a", make_result())])
    with pytest.raises(ForecastError) as e:
        build(m, llama3(), 64, 8, 1)
    msg = str(e.value)
    assert "'hung_rank'" in msg and "scenarios/network_partition.yaml" in msg
    assert "scenarios/worker_crash.yaml" in msg and "scenarios/total_failure_restart.yaml" in msg


def test_simulated_goodput_matches_renewal_theory_for_a_fixed_cost(tmp_path):
    """Failures at rate lam, each costing R with nothing to redo: goodput = 1 / (1 + lam R)."""
    m = load_runs([write_run(tmp_path, "a", make_result(phases=(0, 0, 60.0, 0)))])
    from chaosbench.forecast.presets import Cause, FailureModel
    model = FailureModel("x", "x", [Cause("c", "node_loss", per_node_day=24.0)])     # 1 per node-hour
    plan = build(m, model, 3, 1, 2.0, {"memory": 1e-3, "nvme": math.inf, "s3": math.inf}, trajectories=400, seed=1)
    plan.spec.stall_s["memory"] = 0.0
    out = simulate(plan.spec, {t: [v] for t, v in plan.intervals.items()})
    lam = 3 / 3600
    assert out.goodput.mean() == pytest.approx(1 / (1 + lam * 60), abs=0.002)
    assert out.count_by_cause.mean() == pytest.approx(2 * 24 * 3 / (1 + lam * 60), rel=0.03)


def test_no_failures_leaves_only_the_checkpoint_stall(tmp_path):
    m = load_runs([write_run(tmp_path, "a", make_result())])
    from chaosbench.forecast.presets import Cause, FailureModel
    plan = build(m, FailureModel("x", "x", [Cause("c", "node_loss", per_gpu_hour=0.0)]), 8, 8, 1,
                 {"memory": 10.0, "nvme": 100.0, "s3": math.inf}, trajectories=10)
    out = simulate(plan.spec, {t: [v] for t, v in plan.intervals.items()})
    assert np.allclose(out.goodput, 1 / (1 + 0.003 / 10 + 0.01 / 100))


def test_optimum_matches_young_daly_on_the_simple_case():
    c = young_daly_case(trajectories=500)
    assert c.passed, c.detail


def test_llama3_sanity_check_above_90_percent():
    c = llama3_case(trajectories=300)
    assert c.passed, c.detail


def test_runs_at_two_sizes_fit_rendezvous_per_doubling(tmp_path):
    m = load_runs([write_run(tmp_path, "a", make_result(phases=(0.1, 0.6, 0.2, 0.05), nodes=3)),
                   write_run(tmp_path, "b", make_result(phases=(0.1, 1.2, 0.2, 0.05), nodes=6))])
    from chaosbench.forecast.presets import Cause, FailureModel
    plan = build(m, FailureModel("x", "x", [Cause("c", "node_loss", per_node_day=1.0)]), 12, 1, 1)
    rdzv = plan.spec.recoveries["node_loss"][:, 1]
    assert rdzv == pytest.approx([1.8, 1.8])          # +0.6 s per doubling, carried to 12 nodes
    assert any("fitted" in a for a in plan.assumptions)
    one = build(load_runs([write_run(tmp_path, "c", make_result(nodes=4))]),
                FailureModel("x", "x", [Cause("c", "node_loss", per_node_day=1.0)]), 16, 1, 1)
    assert one.spec.recoveries["node_loss"][0, 1] == pytest.approx(0.6 * 2)   # stated default: log2(16)/log2(4)


def test_assume_borrows_a_measured_class_and_says_so(tmp_path):
    m = load_runs([write_run(tmp_path, k, make_result(k)) for k in ("node_loss", "worker_crash", "full_restart")])
    plan = build(m, llama3(), 64, 8, 1, assume={"hung_rank": "node_loss"}, trajectories=10)
    assert np.array_equal(plan.spec.recoveries["hung_rank"], plan.spec.recoveries["node_loss"])
    assert any("hung_rank: not measured; recoveries of node_loss" in a for a in plan.assumptions)


def test_a_forecast_too_large_to_hold_says_how_many_trajectories_fit(tmp_path):
    m = load_runs([write_run(tmp_path, "a", make_result())])
    from chaosbench.forecast.presets import Cause, FailureModel
    plan = build(m, FailureModel("x", "x", [Cause("c", "node_loss", per_gpu_hour=1e-5)]), 10_000_000, 8, 365)
    with pytest.raises(ForecastError, match="lower --trajectories to"):
        simulate(plan.spec, {t: [v] for t, v in plan.intervals.items()})


def test_elastic_shrink_adds_the_shrunk_time_and_a_join_restart(tmp_path):
    m = load_runs([write_run(tmp_path, "a", make_result(phases=(0.1, 0.6, 0.2, 0.05), nodes=4))])
    from chaosbench.forecast.presets import Cause, FailureModel
    model = FailureModel("x", "x", [Cause("c", "node_loss", per_node_day=1.0)])
    spare = build(m, model, 4, 1, 1).spec.recoveries["node_loss"][0]
    shrink = build(m, model, 4, 1, 1, replace_after_s=600).spec.recoveries["node_loss"][0]
    assert shrink[1:4] == pytest.approx(spare[1:4]) and spare[4] == 0
    assert shrink[4] == pytest.approx(spare[1:4].sum())              # the join: rendezvous, restore, first step again
    assert shrink[5] == pytest.approx(spare[5] + 600 / 4)             # 1 of 4 nodes missing for 600 s
    assert shrink[0] == spare[0]
    # a run that measured its join round: that join is the newcomer's cost, not an assumed repeat
    mj = load_runs([write_run(tmp_path, "j", make_result(phases=(0.1, 0.6, 0.2, 0.05), nodes=4, join=(5.0, 2.0, 0)))])
    measured_join = build(mj, model, 4, 1, 1).spec.recoveries["node_loss"][0]
    assert build(mj, model, 4, 1, 1, replace_after_s=600).spec.recoveries["node_loss"][0][4] == measured_join[4]
    with pytest.raises(ForecastError, match="--replace-after must be >= 0"):
        build(m, model, 4, 1, 1, replace_after_s=-1)


def test_a_phase_faster_at_more_nodes_is_not_extrapolated_below_its_measure(tmp_path):
    m = load_runs([write_run(tmp_path, "a", make_result(phases=(0.1, 1.45, 0.2, 0.05), nodes=3)),
                   write_run(tmp_path, "b", make_result(phases=(0.1, 1.2, 0.2, 0.05), nodes=6))])
    from chaosbench.forecast.presets import Cause, FailureModel
    plan = build(m, FailureModel("x", "x", [Cause("c", "node_loss", per_node_day=1.0)]), 256, 1, 1)
    assert plan.spec.recoveries["node_loss"][:, 1] == pytest.approx([1.45, 1.2])


def test_bench_windows_that_ran_at_different_speeds_before_any_fault_are_not_comparable():
    from chaosbench.forecast.validate import baseline_mismatch
    steps = [{"ts": t / 10, "step": t} for t in range(0, 300)]          # 10 steps/s before the fault at 30 s
    faults = [{"injected_at": 30.0}]
    assert baseline_mismatch(10.2, steps, faults) is None
    assert "ran 10.00 steps/s, the fault-free one 13.00" in baseline_mismatch(13.0, steps, faults)
    assert "no steady stretch" in baseline_mismatch(10.0, steps[:20], faults)
