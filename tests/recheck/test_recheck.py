"""`chaosbench recheck`: a stored run judged again with today's checks gives the run's own verdict,
and a changed expectation or history moves it (the diff names the check)."""
import json
import shutil

import yaml
from typer.testing import CliRunner

from chaosbench.cli import app
from chaosbench.recheck import recheck
from tests.scenario.test_runner import BASE, run


def _stored_run(tmp_path, data=None):
    out, _ = run(tmp_path / "runs", data)
    return out


def test_recheck_of_a_passed_run_gives_the_same_verdict(tmp_path):
    out = _stored_run(tmp_path)
    assert out.result.verdict == "passed"
    before = json.loads((out.run_dir / "result.json").read_text())
    r = recheck(out.run_dir)
    assert (r.old_verdict, r.new_verdict, r.changed, r.exit_code) == ("passed", "passed", [], 0)
    after = json.loads((out.run_dir / "result.json").read_text())
    assert [c["status"] for c in after["checks"]] == [c["status"] for c in before["checks"]]
    assert (out.run_dir / "result.previous.json").is_file() and (out.run_dir / "junit.xml").is_file()


def test_recheck_of_a_failed_run_stays_failed(tmp_path):
    out = _stored_run(tmp_path, {**BASE, "expect": {**BASE["expect"], "recovered_from": "s3"}})
    r = recheck(out.run_dir, write=False)
    assert (r.old_verdict, r.new_verdict, r.exit_code) == ("failed", "failed", 1)


def test_a_stricter_stored_expectation_moves_the_verdict_and_names_the_check(tmp_path):
    out = _stored_run(tmp_path)
    sc = out.run_dir / "scenario.yaml"
    data = yaml.safe_load(sc.read_text())
    data["expect"]["recovered_from"] = "s3"
    sc.write_text(yaml.safe_dump(data))
    r = recheck(out.run_dir)
    assert (r.old_verdict, r.new_verdict, r.exit_code) == ("passed", "failed", 1)
    assert ("recovered_from", "passed", "failed") in r.changed
    assert json.loads((out.run_dir / "result.json").read_text())["verdict"] == "failed"
    assert json.loads((out.run_dir / "result.previous.json").read_text())["verdict"] == "passed"


def test_a_history_without_the_restore_event_fails_on_recheck(tmp_path):
    out = _stored_run(tmp_path)
    for f in (out.run_dir / "events").glob("*.jsonl"):   # the restore claims vanish from the record
        f.write_text("".join(ln + "\n" for ln in f.read_text().splitlines() if '"checkpoint_loaded"' not in ln))
    r = recheck(out.run_dir, write=False)
    assert r.new_verdict == "failed" and any(n == "recovered_from" for n, _, _ in r.changed)


def test_cli_exit_codes_and_bad_input(tmp_path):
    out = _stored_run(tmp_path)
    cli = CliRunner()
    ok = cli.invoke(app, ["recheck", str(out.run_dir), "--dry-run"])
    assert ok.exit_code == 0 and "passed -> passed" in ok.output
    missing = cli.invoke(app, ["recheck", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no result.json" in missing.output
    broken = tmp_path / "broken"
    shutil.copytree(out.run_dir, broken)
    (broken / "scenario.yaml").write_text("name: x\nexpect: {recovered_from: floppy}\n")
    bad = cli.invoke(app, ["recheck", str(broken), "--json"])
    assert bad.exit_code == 2 and "no longer validates" in bad.output
