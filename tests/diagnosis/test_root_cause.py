"""Root cause across nodes, and where it shows: the stop reason, diagnosis.json, the report, the CLI
summary and doctor --run."""
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from chaosbench.diagnosis import diagnose

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]


def test_a_crash_loop_is_named_with_its_node_count_and_error():
    rc = diagnose(DATA / "missing_dir").root_cause
    assert rc.repeats >= 3 and rc.node in ("node-0", "node-1")
    assert rc.error.startswith("RuntimeError: Parent directory") and f"failed {rc.repeats} times with" in rc.summary


def test_a_peers_connection_error_after_a_fault_is_a_consequence_not_the_cause():
    rc = diagnose(DATA / "keepalive_default").root_cause
    assert rc.summary.startswith("the injected fault f1 (kill_node node-1)"), rc.summary


def _explained(d: Path, stop: str) -> dict:
    """The analyse step's stop reason, before result.json exists (it finds the root cause before the checks)."""
    from chaosbench.analyse import explain_stop
    from chaosbench.checks.history import History
    from chaosbench.diagnosis.record import RunRecord
    from chaosbench.diagnosis.rootcause import root_cause
    rec = RunRecord.of(d, History.load(d), result={})
    harness = {"stop_reason": stop}
    assert explain_stop(harness, rec, root_cause(rec))
    assert not explain_stop(harness, rec, root_cause(rec))   # named once: a recheck adds nothing
    return harness


def test_the_stop_reason_names_the_root_cause_not_the_last_exception_of_the_first_log(run_copy):
    d = run_copy("missing_dir")
    harness = json.loads((d / "harness.json").read_text())
    harness = _explained(d, harness["stop_reason"].split("; ")[0])
    assert "root cause: node-" in harness["stop_reason"] and "times with: RuntimeError: Parent directory" \
        in harness["stop_reason"], harness["stop_reason"]


def test_report_opens_with_what_to_fix_linking_into_the_logs(run_copy):
    from chaosbench.recheck import recheck
    d = run_copy("keepalive_default")
    recheck(d)   # the analyse step writes diagnosis.json and the report
    html = (d / "report.html").read_text()
    assert (d / "diagnosis.json").is_file()
    top, fix = html.index('id="what-to-fix"'), html.index('id="run"')
    assert top < fix and "finding-rdzv_keepalive_default" in html[top:fix]
    assert 'href="#q=' in html[top:fix] and "Expected effect:" in html[top:fix]


def test_report_of_a_clean_run_has_no_advice(run_copy):
    from chaosbench.recheck import recheck
    d = run_copy("node_loss_plain")
    recheck(d)
    html = (d / "report.html").read_text()
    assert "finding-" not in html


def test_cli_summary_prints_the_first_finding(run_copy, capsys):
    from chaosbench import cli
    from chaosbench.result import RunResult
    from chaosbench.recheck import recheck
    d = run_copy("missing_dir")
    recheck(d)
    outcome = SimpleNamespace(scenario="x", run_dir=d, result=RunResult.read(d), exit_code=1)
    cli._summary([outcome])
    out = capsys.readouterr().out
    assert "to fix" in out and "does not exist" in out and "os.makedirs" in out, out


def test_doctor_run_prints_the_findings_for_a_finished_run(run_copy):
    d = run_copy("keepalive_default")
    r = subprocess.run([sys.executable, "-m", "chaosbench.doctor", "--run", str(d), "--json"], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    found = json.loads(r.stdout)["diagnosis"]
    assert {f["rule"] for f in found["findings"]} >= {"rdzv_keepalive_default", "checkpoint_interval"}


def test_while_the_run_collects_the_fault_log_attributes_a_peers_timeout_to_the_injected_fault(run_copy):
    """The analyse step asks before result.json is written: the fault comes from the History's fault windows."""
    d = run_copy("hang_short_timeout")
    (d / "result.json").unlink()
    stop = json.loads((d / "harness.json").read_text())["stop_reason"].split("; root cause")[0]
    harness = _explained(d, stop)
    assert "root cause: the injected fault f1 (pause_node node-1); node-0's rank 0 failed after it with: " \
        "RuntimeError:" in harness["stop_reason"], harness["stop_reason"]


def test_docker_log_times_place_a_failure_after_the_injected_fault(tmp_path):
    """docker's `-t` prefix (UTC) precedes torch's glog line: the failure's time comes from it."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "node-1.log").write_text(
        "2026-11-23T23:12:15.660804378Z E1123 23:12:15.660000 7 torch/distributed/elastic/multiprocessing/api.py:1002]"
        " failed (exitcode: 1) local_rank: 0 (pid: 26) of binary: /opt/venv/bin/python\n")
    (tmp_path / "result.json").write_text(json.dumps({"faults": [
        {"id": "f1", "type": "kill_node", "target": "node-2", "injected_at": 1795475535.0}]}))
    rc = diagnose(tmp_path).root_cause
    assert rc.first_failure_at == 1795475535.660804 and rc.fault_id == "f1", rc


def test_a_job_that_reports_its_error_as_a_fatal_event_is_named_with_it(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "events").mkdir()
    (tmp_path / "logs" / "node-0.log").write_text(
        "2026-11-23T23:12:15.660804378Z E1123 23:12:15.660000 7 torch/distributed/elastic/multiprocessing/api.py:1002]"
        " failed (exitcode: 1) local_rank: 0 (pid: 26) of binary: python\n")
    (tmp_path / "events" / "events-node-0-local0.jsonl").write_text(json.dumps(
        {"ts": 1795475535.2, "event": "fatal", "node": "node-0", "rank": 0, "error": "OSError: [Errno 28] No space left"}) + "\n")
    rc = diagnose(tmp_path).root_cause
    assert rc.error == "OSError: [Errno 28] No space left" and rc.evidence[0].source.startswith("events/"), rc


def test_an_error_a_cooperative_fault_raised_inside_the_job_is_attributed_to_the_fault():
    # a real docker run of scenarios/worker_error.yaml: rank 1 raised the CUDA-style error through cb.fault_point
    rc = diagnose(DATA / "worker_error").root_cause
    assert rc.fault_id == "f1" and rc.node == "node-1", rc
    assert rc.summary.startswith("the injected fault f1 (worker_error rank 1); node-1's rank 0 failed after it with: "
                                 "CUDA error: an illegal memory access"), rc.summary


def test_the_same_error_on_a_node_where_the_fault_did_not_fire_is_not_attributed(tmp_path):
    import shutil
    d = tmp_path / "run"
    shutil.copytree(DATA / "worker_error", d)
    for f in (d / "events").glob("events-*.jsonl"):   # as if the job had failed on its own
        f.write_text("".join(line + "\n" for line in f.read_text().splitlines() if '"fault_fired"' not in line))
    rc = diagnose(d).root_cause
    assert rc.fault_id is None and rc.summary.startswith("node-1's rank 0 failed first with: CUDA error"), rc.summary
