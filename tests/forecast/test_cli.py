"""`chaosbench forecast`: JSON keys, the HTML page, and exit 2 (never a traceback) on bad input."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from chaosbench.cli import app
from chaosbench.forecast.cli import main
from chaosbench.forecast.output import JSON_KEYS

from .synth import make_result, preset_runs, write_run

ARGS = ["--gpus", "1024", "--days", "7", "--trajectories", "200"]


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


@pytest.mark.parametrize("preset", ["llama3-405b", "rsc"])
def test_json_has_exactly_the_documented_keys(tmp_path, capsys, preset):
    rc, out, err = _run(capsys, *preset_runs(tmp_path), *ARGS, "--failures", preset, "--optimize", "--json")
    assert rc == 0, err
    fig = json.loads(out)
    assert tuple(fig) == JSON_KEYS
    assert 0 < fig["goodput_ci"][0] <= fig["goodput"] <= fig["goodput_ci"][1] < 1
    assert set(fig["optimal_interval_s"]) == {"memory", "nvme", "s3"}
    assert fig["optimal_interval_s"]["memory"] > 0 and fig["young_daly_interval_s"]["nvme"] > 0
    assert fig["optimal_interval_s"]["s3"] is None        # no preset class restores from s3
    assert set(fig["lost_hours_by_phase"]) >= {"detection", "rendezvous", "restore", "recomputation", "checkpoint_stall"}


def test_same_seed_same_forecast_and_a_user_file(tmp_path, capsys):
    f = tmp_path / "fleet.yaml"
    f.write_text("name: ours\ncauses:\n  - {name: gpu, class: node_loss, per_node_day: 0.01}\n")
    run = write_run(tmp_path, "r", make_result())
    a = _run(capsys, run, *ARGS, "--failures", f, "--json", "--seed", "3")[1]
    b = _run(capsys, run, *ARGS, "--failures", f, "--json", "--seed", "3")[1]
    assert a == b and json.loads(a)["interruptions"]["gpu"] == pytest.approx(0.01 * 128 * 7, rel=0.1)


def test_html_page_is_self_contained_with_three_plots(tmp_path, capsys):
    page = tmp_path / "out" / "forecast.html"
    rc, _, err = _run(capsys, *preset_runs(tmp_path), *ARGS, "--failures", "llama3-405b", "-o", page)
    assert rc == 0, err
    html = page.read_text()
    assert html.count("<svg") >= 3 and html.count("<polyline") >= 3
    assert "src=" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")


@pytest.mark.parametrize("case, expect", [
    ("no_recoveries", "no recovery to learn from"),
    ("not_recovered", "it never resumed training"),
    ("unknown_preset", "unknown preset 'llama5'"),
    ("negative_rate", "fleet.yaml:2: causes[0].per_gpu_hour: -0.1 is negative"),
    ("missing_class", "fault class 'hung_rank' (network_switch_cable, nic, nccl_watchdog) has no measured run: "
                      "run scenarios/network_partition.yaml"),
    ("malformed_file", "fleet.yaml:3: causes[0].rate: unknown key"),
    ("no_run_dir", "result.json: not found"),
    ("bad_gpus", "--gpus and --gpus-per-node must be >= 1"),
    ("missing_flag", "Missing option '--gpus'"),
])
def test_bad_input_is_exit_2_with_what_is_missing(tmp_path, capsys, case, expect):
    run = write_run(tmp_path, "ok", make_result())
    failures = "rsc"
    fleet = tmp_path / "fleet.yaml"
    argv = [run, *ARGS]
    if case == "no_recoveries":
        res = make_result()
        res["recoveries"] = []
        argv[0] = write_run(tmp_path, "empty", res)
    elif case == "not_recovered":
        argv[0] = write_run(tmp_path, "stuck", make_result(recovered=False))
    elif case == "unknown_preset":
        failures = "llama5"
    elif case == "negative_rate":
        fleet.write_text("causes:\n  - {name: gpu, class: node_loss, per_gpu_hour: -0.1}\n")
        failures = str(fleet)
    elif case == "malformed_file":
        fleet.write_text("causes:\n  - name: gpu\n    rate: 1\n    class: node_loss\n")
        failures = str(fleet)
    elif case == "no_run_dir":
        argv[0] = tmp_path
    elif case == "bad_gpus":
        argv = [run, "--gpus", "0", "--days", "1"]
    if case == "missing_flag":
        argv = [run, "--days", "1"]
    else:
        argv += ["--failures", failures]
    rc, _, err = _run(capsys, *argv)
    assert rc == 2
    assert expect in err


def test_registered_as_a_chaosbench_subcommand(tmp_path):
    r = CliRunner().invoke(app, ["forecast", str(tmp_path), "--gpus", "8", "--days", "1", "--failures", "rsc"])
    assert r.exit_code == 2


def test_a_result_with_wrong_typed_fields_is_exit_2(tmp_path, capsys):
    res = make_result()
    res["recoveries"][0]["rendezvous_s"] = "slow"
    rc, _, err = _run(capsys, write_run(tmp_path, "bad", res), *ARGS, "--failures", "rsc")
    assert rc == 2 and "bad/result.json: a recovery, checkpoint or step field has the wrong type" in err
