"""Stuck-run diagnosis over synthetic event histories (the event contract of docs/events.md)."""
import json

from chaosbench.doctor import diagnose_run, is_stuck

from .conftest import run_doctor

NOW = 1_800_000_000.0


def ev(node, rank, event, ts, base=NOW, **kw):
    return {"ts": base - ts, "event": event, "node": node, "rank": rank, "local_rank": 0, "world_size": 3,
            "restart_count": kw.pop("restart_count", 0), "pid": 1, "run_id": "r", **kw}


def write_run(tmp_path, per_node: dict, nodes=3, faults=(), torn_tail=False):
    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"cluster": {"nodes": nodes}}))
    for node, events in per_node.items():
        with open(run / "events" / f"events-{node}-local0.jsonl", "w") as f:
            for e in events:
                f.write(json.dumps(e) + "\n")
            if torn_tail:
                f.write('{"ts": 1, "event": "st')
    with open(run / "faults.jsonl", "w") as f:
        for x in faults:
            f.write(json.dumps(x) + "\n")
    return run


def test_training_run_is_not_stuck(tmp_path):
    run = write_run(tmp_path, {f"node-{i}": [ev(f"node-{i}", i, "phase", 30, phase="training"),
                                             ev(f"node-{i}", i, "step", 1, step=50)] for i in range(3)},
                    torn_tail=True)
    d = diagnose_run(run, now=NOW)
    assert not d.stuck and d.phase == "training" and "making progress" in d.cause
    assert is_stuck(run / "events", 30, now=NOW)[0] is False


def test_stuck_in_rendezvous_missing_node(tmp_path):
    """node-0 and node-1 restarted into rendezvous after node-2 died; nobody progressed since."""
    per = {n: [ev(n, r, "phase", 200, phase="training"), ev(n, r, "step", 97, step=40),
               ev(n, r, "phase", 95, phase="rendezvous", restart_count=1)]
           for r, n in enumerate(["node-0", "node-1"])}
    faults = [{"ts": NOW - 98, "fault": "kill_node", "action": "inject", "target": "node-2", "params": {}}]
    run = write_run(tmp_path, per, faults=faults)
    d = diagnose_run(run, now=NOW, no_progress_timeout_s=60)
    assert d.stuck and d.phase == "rendezvous"
    assert d.missing_nodes == ["node-2"]
    assert d.cause == "stuck in rendezvous: 2 of 3 nodes started; node-2 never started; the others have waited 95 s"
    text = "\n".join(d.evidence)
    assert "node-0 rank 0 (restart 1, world 3) has been in rendezvous for 95 s" in text
    assert "last step 40 97 s ago" in text
    assert "fault kill_node on node-2 injected 98 s ago, not healed" in text
    stuck, reason = is_stuck(run / "events", 60, now=NOW)
    assert stuck and reason.startswith("stuck in rendezvous: no progress for 95 s")


def test_stuck_in_process_group(tmp_path):
    per = {f"node-{i}": [ev(f"node-{i}", i, "phase", 120, phase="rendezvous"),
                         ev(f"node-{i}", i, "phase", 110 - i, phase="process_group")] for i in range(3)}
    run = write_run(tmp_path, per)
    d = diagnose_run(run, now=NOW, no_progress_timeout_s=60)
    assert d.stuck and d.phase == "process_group"
    assert "no rank has made progress for 108 s" in d.cause and "node-0 rank 0 has been in process_group for 110 s" \
        in d.cause
    assert "MASTER_ADDR" in d.fix
    assert is_stuck(run / "events", 200, now=NOW)[0] is False     # below the timeout: not yet


def test_fatal_and_complete(tmp_path):
    per = {"node-0": [ev("node-0", 0, "phase", 10, phase="training"),
                      ev("node-0", 0, "fatal", 5, error="boom", error_type="DataLoadingError")]}
    d = diagnose_run(write_run(tmp_path, per, nodes=1), now=NOW)
    assert d.phase == "failed" and "DataLoadingError boom" in d.cause
    per = {"node-0": [ev("node-0", 0, "step", 10, step=200), ev("node-0", 0, "run_complete", 9, step=200)]}
    d = diagnose_run(write_run(tmp_path / "b", per, nodes=1), now=NOW)
    assert d.phase == "complete" and not d.stuck
    assert is_stuck(tmp_path / "b" / "run" / "events", 1, now=NOW) == (False, "every rank ended")


def test_no_events_stuck_only_after_timeout(tmp_path):
    (tmp_path / "ev").mkdir()
    assert is_stuck(tmp_path / "ev", 60, now=NOW, started_at=NOW - 10) == (False, "no events yet")
    stuck, reason = is_stuck(tmp_path / "ev", 60, now=NOW, started_at=NOW - 61)
    assert stuck and reason.startswith("stuck in rendezvous: no worker wrote an event in 61 s")


def test_cli_run_json_and_exit_code(tmp_path):
    import time
    per = {"node-0": [ev("node-0", 0, "phase", 300, base=time.time(), phase="checkpoint_restore")]}
    run = write_run(tmp_path, per, nodes=1)
    p = run_doctor("--run", str(run), "--json", "--timeout", "30")
    assert p.returncode == 1, p.stderr
    d = json.loads(p.stdout)
    assert d["stuck"] and d["phase"] == "checkpoint_restore" and "NVMe" in d["fix"]
    p = run_doctor("--run", str(tmp_path / "nope"))
    assert p.returncode == 2 and "run directory not found" in p.stderr


def test_all_workers_exited_and_none_came_back(tmp_path):
    per = {"node-0": [ev("node-0", 0, "phase", 100, phase="training"),
                      ev("node-0", 0, "fatal", 90, error="peer lost", error_type="DistBackendError")]}
    run = write_run(tmp_path, per, nodes=1)
    assert is_stuck(run / "events", 120, now=NOW) == (False, "every worker exited 90 s ago; waiting for a restart")
    stuck, reason = is_stuck(run / "events", 60, now=NOW)
    assert stuck and reason.startswith("stuck in rendezvous: no worker came back 90 s after all exited")
    assert "DistBackendError peer lost" in reason


def test_last_error_of_a_node_log_is_the_jobs_exception_not_torchruns_summary(tmp_path):
    from chaosbench.diagnosis.agent_logs import last_error
    log = tmp_path / "node-0.log"
    log.write_text("2026-11-23T13:21:30.7Z [default0]:Traceback (most recent call last):\n"
                   "2026-11-23T13:21:30.7Z [default0]:ModuleNotFoundError: No module named 'mine'\n"
                   "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
                   "  exitcode  : 1 (pid: 6458)\n")
    assert last_error(log) == "ModuleNotFoundError: No module named 'mine'"
    log.write_text("[default0]:usage: train.py [-h]\n[default0]:train.py: error: unrecognized arguments: --x\n")
    assert last_error(log) == "train.py: error: unrecognized arguments: --x"
    log.write_text("step 1 loss 0.5\nall fine\n")
    assert last_error(log) is None and last_error(tmp_path / "absent.log") is None


def test_last_error_reads_through_torch_rank_prefixes(tmp_path):
    """torch >= 2.4 puts "[rankN]:" behind torchrun's "[default0]:"; the runner's fallback reads through both."""
    from chaosbench.diagnosis.agent_logs import last_error
    log = tmp_path / "node-0.log"
    log.write_text("2026-11-24T10:00:00.000000000Z [default0]:[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert last_error(log) == "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_a_finished_run_is_judged_at_its_stop_not_by_lines_read_during_teardown(tmp_path):
    """A node frozen mid-run (pause_node) is thawed by the heal at stop; its watcher then stamps the
    log line it had not read yet with the time it reads it, after the harness stopped the run as stuck.
    That line is not progress: the doctor on the finished run says stuck, as the harness did."""
    per = {n: [ev(n, r, "phase", 40, phase="training"), ev(n, r, "step", 31, step=20)]
           for r, n in enumerate(["node-0", "node-1"])}
    per["node-2"] = [ev("node-2", 2, "phase", 40, phase="training"), ev("node-2", 2, "step", -0.5, step=20)]
    run = write_run(tmp_path, per)
    (run / "harness.json").write_text(json.dumps({"stopped_at": NOW, "ending": "stuck"}))
    d = diagnose_run(run, no_progress_timeout_s=20)
    assert d.stuck and d.now == NOW and "no rank has made progress for 31 s" in d.cause, d.cause
    # judged at an explicit time (a live run: no stop recorded yet), the late line counts
    assert not diagnose_run(run, now=NOW + 1, no_progress_timeout_s=20).stuck
