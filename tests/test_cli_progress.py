"""`chaosbench run`'s progress view at 80 columns and in a log, and `chaosbench list`'s checks."""
from __future__ import annotations

import io

from rich.console import Console
from typer.testing import CliRunner

from chaosbench import cli
from chaosbench.checks.registry import all_checks
from chaosbench.observer.progress import Progress

LONG = ("injected f1 (kill_node node-2) at step 40; waiting for the survivors to rendezvous again and for "
        "the first step after the restore")


def _progress(**kw) -> Progress:
    p = Progress(phase="training", step=1234, world_size=3, faults_injected=1, faults_pending=1, checks_pending=4)
    for k, v in kw.items():
        setattr(p, k, v)
    return p


def test_live_table_keeps_one_line_per_scenario_at_80_columns():
    states = {"scenarios/node_loss.yaml": {"progress": _progress(message=LONG)},
              "scenarios/a_scenario_with_a_rather_long_file_name.yaml": {"progress": _progress(message="ok")},
              "scenarios/queued.yaml": {}}
    con = Console(width=80, record=True, file=io.StringIO())
    con.print(cli._status_table(states))
    lines = con.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    # header, rule, one line per scenario: nothing wrapped
    assert len(lines) == 2 + len(states), "\n".join(lines)
    row = next(line for line in lines if line.startswith("node_loss "))
    assert "injected f1 (kill" in row and row.rstrip().endswith("…")
    assert any(line.startswith("a_scenario_with_a…") for line in lines)
    assert "1/2" in row and "4 pending" in row and "1234" in row
    assert any("queued" in line for line in lines)


def test_plain_lines_when_not_a_terminal(monkeypatch):
    buf, tty = io.StringIO(), Console(file=io.StringIO(), force_terminal=True)
    log = Console(file=buf, width=80, force_terminal=False)
    monkeypatch.setattr(cli, "console", log)
    monkeypatch.setattr(cli, "out", Console(file=io.StringIO(), force_terminal=False))
    states = {"scenarios/node_loss.yaml": {}}
    view = cli._ProgressView(states, quiet=False)
    assert view.live is None and view.plain
    with view:
        view.update("scenarios/node_loss.yaml", _progress(faults_injected=0, faults_pending=2, message=LONG))
        view.update("scenarios/node_loss.yaml", _progress(step=1300, faults_injected=0, faults_pending=2))
        view.update("scenarios/node_loss.yaml", _progress(step=1310))
    assert buf.getvalue().splitlines() == [
        "node_loss: training, step 1234, world 3, faults 0/2, checks 4 pending",
        "node_loss: training, step 1310, world 3, faults 1/2, checks 4 pending"]
    assert states["scenarios/node_loss.yaml"]["progress"].step == 1310
    # on a terminal (both streams) the live table draws instead; --quiet prints neither
    monkeypatch.setattr(cli, "console", tty)
    monkeypatch.setattr(cli, "out", tty)
    assert cli._ProgressView({}, quiet=False).live is not None
    quiet = cli._ProgressView({}, quiet=True)
    assert quiet.live is None and not quiet.plain


def test_every_check_has_help_and_needs_and_list_shows_them(monkeypatch):
    defs = all_checks()
    assert {"invariants", "record_integrity", "fault", "ending", "recovered_from"} <= {d.name for d in defs}
    for d in defs:
        assert d.help and d.needs, d.name
    # the module's console was made at import, before COLUMNS could say anything: widen it for this call
    monkeypatch.setattr(cli.out, "_width", 250)
    res = CliRunner().invoke(cli.app, ["list", "--scenarios", "/nonexistent"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    text = res.output
    assert "checks (expect: KEY asks for one" in text
    for d in defs:
        row = next((line for line in text.splitlines() if line.startswith(f"│ {d.name} ")), None)
        assert row is not None, d.name
        assert d.help[:30] in row and d.needs in row, row
    assert any(line.startswith("│ invariants ") and "always" in line for line in text.splitlines())
