"""CLI behaviour that needs no cluster: validation, listing, bad input exit codes."""
from pathlib import Path

from typer.testing import CliRunner

from chaosbench.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_validate_good_and_bad(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    ok = runner.invoke(app, ["validate", "scenarios/node_loss.yaml"])
    assert ok.exit_code == 0 and "ok scenarios/node_loss.yaml" in ok.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nexpect: {recovered_from: disk}\n")
    res = runner.invoke(app, ["validate", str(bad), "scenarios/"])
    assert res.exit_code == 2
    assert f"{bad}:2: expect.recovered_from" in res.output and "'memory', 'nvme' or 's3'" in res.output


def test_run_with_bad_input_exits_2_before_starting(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nfaults: [{at: {step: 3}, explode: {}}]\n")
    res = runner.invoke(app, ["run", str(bad), "--report-dir", str(tmp_path / "reports"), "--quiet"])
    assert res.exit_code == 2 and "unknown fault type 'explode'" in res.output
    assert not (tmp_path / "reports").exists()
    res = runner.invoke(app, ["run", str(tmp_path / "missing.yaml"), "--quiet"])
    assert res.exit_code == 2 and "cannot read" in res.output


def test_unknown_backend_is_bad_input(monkeypatch):
    monkeypatch.chdir(ROOT)
    res = runner.invoke(app, ["run", "scenarios/node_loss.yaml", "--backend", "k8s", "--quiet"])
    assert res.exit_code == 2 and "unknown backend 'k8s'" in res.output


def test_list_shows_scenarios_and_faults(monkeypatch):
    monkeypatch.chdir(ROOT)
    res = runner.invoke(app, ["list"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    for word in ("node_loss", "kill_node", "partition", "link_toxic", "corrupt_checkpoint", "kill_all"):
        assert word in res.output


def test_report_needs_a_run_dir(tmp_path):
    res = runner.invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "no result.json" in res.output


def test_summary_prints_log_text_literally(capsys):
    from chaosbench.cli import _summary
    from chaosbench.result import CheckResult, ClusterShape, RunResult, ScenarioRef
    from chaosbench.runner import RunOutcome
    hostile = "[/__w/pytorch/gloo/pair.cc:152] [bold]timed out"
    r = RunResult(run_id="x", scenario=ScenarioRef(name="s"), backend="local", seed=0, command="c", started_at=0,
                  cluster=ClusterShape(nodes=2, min_nodes=1, max_nodes=2, rendezvous="c10d"), verdict="failed",
                  error=hostile, checks=[CheckResult(name="log_regex:[x]", status="failed", reason=hostile)])
    _summary([RunOutcome("s", Path("/nonexistent"), r, 1)])
    text = capsys.readouterr().out
    assert text.count("[/__w/pytorch/gloo/pair.cc:152] [bold]timed out") == 2 and "log_regex:[x] FAILED" in text


def test_an_unwritable_report_dir_is_bad_input_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    a_file = tmp_path / "afile"
    a_file.write_text("")
    for where in (a_file, a_file / "sub"):
        res = runner.invoke(app, ["run", "scenarios/node_loss.yaml", "--report-dir", str(where), "--quiet"])
        assert res.exit_code == 2, res.output
        assert f"--report-dir: cannot write reports in '{where}'" in res.output and "choose a writable" in res.output


def test_summary_shows_how_each_run_ended(capsys, monkeypatch):
    from chaosbench.cli import _summary
    from chaosbench.result import ClusterShape, RunResult, ScenarioRef
    from chaosbench.runner import RunOutcome
    monkeypatch.setenv("COLUMNS", "200")
    shape = ClusterShape(nodes=2, min_nodes=1, max_nodes=2, rendezvous="c10d")
    runs = [RunOutcome(n, Path("/nonexistent"), RunResult(run_id=n, scenario=ScenarioRef(name=n), backend="local", seed=0,
                                                           command="c", started_at=0, cluster=shape, verdict=v, ending=e), 1)
            for n, v, e in (("hung_story", "failed", "stuck"), ("ok_story", "passed", "reached_step"))]
    _summary(runs)
    rows = {ln.split("│")[1].strip(): ln for ln in capsys.readouterr().out.splitlines() if ln.count("│") > 3}
    assert "stuck" in rows["hung_story"] and "reached_step" in rows["ok_story"]
