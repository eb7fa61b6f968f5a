"""Run-wide checks (progress, restarts, loss, checkpoint files, fatal, logs) over synthetic histories."""
import hashlib
import json

from chaosbench.checks.history import History
from chaosbench.evidence.inventory import take_inventory
from chaosbench.checks.recovery import recoveries
from chaosbench.checks.run_checks import (checkpoints_valid, log_regex, loss_continuity, no_fatal,
                                          no_restart, reaches_step)
from chaosbench.scenario.model import Expect, LogRegex, LossContinuity

from .synth import node_loss, no_fault


def run(check, h, **expect):
    return check(h, Expect(**expect), recoveries(h))


def test_reaches_step_with_budget_and_stop_reason():
    h = node_loss()                      # last step 100 at t = 7.0 + 5.9
    assert run(reaches_step, h, reaches_step=100).status == "passed"
    assert run(reaches_step, h, reaches_step=100, within_seconds=20).status == "passed"
    res = run(reaches_step, h, reaches_step=100, within_seconds=10)
    assert res.status == "failed" and "over the 10 s budget" in res.reason
    h.harness["stop_reason"] = "stuck: no new step for 120 s"
    res = run(reaches_step, h, reaches_step=500)
    assert res.status == "failed" and res.observed == 100 and "stuck: no new step" in res.reason
    assert run(reaches_step, History(), reaches_step=5).status == "not_evaluated"


def test_no_restart():
    assert run(no_restart, no_fault(), no_restart=True).status == "passed"
    res = run(no_restart, node_loss(), no_restart=True)
    assert res.status == "failed" and res.observed == 2 and "node-0/local0 x1" in res.reason
    assert run(no_restart, node_loss(), no_restart=None) is None
    assert run(no_restart, History(), no_restart=True).status == "not_evaluated"


def test_loss_continuity():
    assert run(loss_continuity, node_loss(), loss_continuity=True).status == "passed"
    res = run(loss_continuity, node_loss(after_loss=5.5), loss_continuity=LossContinuity(max_increase=0.2))
    assert res.status == "failed" and "5.5000 after" in res.reason
    h = node_loss()
    for e in h.events:
        e.pop("loss", None)
    assert run(loss_continuity, h, loss_continuity=True).status == "not_evaluated"
    assert run(loss_continuity, no_fault(), loss_continuity=True).status == "not_evaluated"


def _ckpt(root, step, data=b"weights" * 100, manifest=True, corrupt=False, algo="crc32"):
    d = root / f"step-{step:08d}"
    d.mkdir(parents=True)
    (d / "state.pt").write_bytes(data if not corrupt else data[:-1] + b"X")
    if manifest:   # the trainer's own manifest format, so the harness is pinned to what it really writes
        from trainer.checkpoint.fmt import checksum, make_manifest
        (d / "manifest.json").write_text(json.dumps(make_manifest(step, data, checksum(data, algo))))


def test_checkpoints_valid_over_real_files(tmp_path):
    nvme = tmp_path / "node-0"
    _ckpt(nvme, 20)
    _ckpt(nvme, 40)
    (nvme / ".chaosbench-fill").write_bytes(b"0" * 10)      # the fill_nvme ballast is ignored
    h = History(inventory=take_inventory({"node-0/nvme": ("nvme", nvme)}))
    res = run(checkpoints_valid, h, checkpoints_valid=True)
    assert res.status == "passed" and res.observed == 2

    (nvme / "step-00000060.tmp").mkdir()
    (nvme / "step-00000060.tmp" / "state.pt").write_bytes(b"half")
    _ckpt(nvme, 80, corrupt=True, algo="sha256")
    h = History(inventory=take_inventory({"node-0/nvme": ("nvme", nvme)}))
    res = run(checkpoints_valid, h, checkpoints_valid=True)
    assert res.status == "failed" and res.observed == 1
    assert "node-0/nvme:step-00000080 (checksum mismatch" in res.reason
    assert "1 temp leftover(s)" in res.reason          # an interrupted atomic write is not a failure

    _ckpt(tmp_path / "n1", 20)
    _ckpt(tmp_path / "n1", 40, manifest=False)         # published without its manifest: incomplete
    h = History(inventory=take_inventory({"node-1/nvme": ("nvme", tmp_path / "n1")}))
    res = run(checkpoints_valid, h, checkpoints_valid=True)
    assert res.status == "failed" and "step-00000040 (no manifest.json)" in res.reason


def test_checkpoints_valid_not_evaluated_cases(tmp_path):
    assert run(checkpoints_valid, History(), checkpoints_valid=True).status == "not_evaluated"
    empty = History(inventory=take_inventory({"n/nvme": ("nvme", tmp_path)}))
    assert "no published checkpoint" in run(checkpoints_valid, empty, checkpoints_valid=True).reason
    _ckpt(tmp_path, 1, manifest=False)
    h = History(inventory=take_inventory({"n/nvme": ("nvme", tmp_path)}))
    res = run(checkpoints_valid, h, checkpoints_valid=True)
    assert res.status == "not_evaluated" and "no manifest" in res.reason


def test_no_fatal():
    res = run(no_fatal, node_loss(), no_fatal=True)
    assert res.status == "failed" and res.observed == 2 and "DistBackendError" in res.reason
    assert run(no_fatal, node_loss(fatal=False), no_fatal=True).status == "passed"
    assert run(no_fatal, History(), no_fatal=True).status == "not_evaluated"


def test_log_regex():
    h = History(logs={"node-0.log": "step 1\nWARNING rendezvous timed out\n", "node-1.log": "fine\n"})
    present, absent, scoped = run(log_regex, h, log_regex=[
        LogRegex(pattern=r"rendezvous timed out"),
        LogRegex(pattern=r"Traceback", expect="absent"),
        LogRegex(pattern=r"timed out", node="node-1"),
    ])
    assert present.status == "passed" and "node-0.log" in present.reason
    assert absent.status == "passed"
    assert scoped.status == "failed" and scoped.observed == "absent"
    (nolog,) = run(log_regex, History(), log_regex=[LogRegex(pattern="x")])
    assert nolog.status == "not_evaluated"


def test_nested_logs_of_several_nodes_are_each_read_and_scoped_to_their_node(tmp_path):
    # Ray's logs: logs/ray/<node>/logs/raylet.out on every node; one name, several files
    for node, line in (("node-0", "all fine"), ("node-1", "Raylet is terminating")):
        d = tmp_path / "logs" / "ray" / node / "logs"
        d.mkdir(parents=True)
        (d / "raylet.out").write_text(line + "\n")
    h = History.load(tmp_path)
    assert sorted(h.logs) == ["ray/node-0/logs/raylet.out", "ray/node-1/logs/raylet.out"]
    on1, on0 = run(log_regex, h, log_regex=[LogRegex(pattern="terminating", node="node-1"),
                                            LogRegex(pattern="terminating", node="node-0")])
    assert on1.status == "passed" and "ray/node-1/" in on1.reason
    assert on0.status == "failed"


def test_history_load_skips_torn_lines(tmp_path):
    (tmp_path / "events").mkdir()
    good = json.dumps({"ts": 1.0, "event": "step", "node": "node-0", "step": 1})
    (tmp_path / "events" / "events-node-0-local0.jsonl").write_text(good + "\n" + '{"ts": 2.0, "ev')
    (tmp_path / "faults.jsonl").write_text(
        json.dumps({"ts": 1.5, "id": "f1", "fault": "pause_node", "action": "inject", "target": "node-1",
                    "params": {}}) + "\n" +
        json.dumps({"ts": 3.5, "id": "f1", "fault": "pause_node", "action": "heal", "target": "node-1",
                    "params": {}}) + "\n")
    h = History.load(tmp_path)
    assert [e["step"] for e in h.events] == [1]
    assert h.faults[0].injected_at == 1.5 and h.faults[0].healed_at == 3.5
    assert h.inventory is None and h.logs == {}


def test_inventory_catches_a_flipped_byte_under_the_default_crc32(tmp_path):
    nvme = tmp_path / "node-0"
    _ckpt(nvme, 20)
    _ckpt(nvme, 40, corrupt=True)        # same size, one byte differs: only the checksum can tell
    res = run(checkpoints_valid, History(inventory=take_inventory({"n0/nvme": ("nvme", nvme)})),
              checkpoints_valid=True)
    assert res.status == "failed" and "step-00000040 (checksum mismatch" in res.reason


def test_inventory_skips_checkpoints_rotated_away_while_walking(tmp_path, monkeypatch):
    import shutil
    from chaosbench.evidence import inventory
    nvme = tmp_path / "node-0"
    _ckpt(nvme, 20)
    _ckpt(nvme, 40)
    real = inventory.verify_dir

    def rotate_then_verify(d):           # the trainer deletes step 20 between the walk and the check
        shutil.rmtree(nvme / "step-00000020", ignore_errors=True)
        return real(d)
    monkeypatch.setattr(inventory, "verify_dir", rotate_then_verify)
    inv = take_inventory({"n0/nvme": ("nvme", nvme)})
    assert [c["dir"] for c in inv["checkpoints"]] == ["step-00000040"]


def test_no_fatal_on_a_job_without_events_reads_the_agents():
    watched = [{"ts": 1.0, "event": "worker_start", "node": "node-0", "rank": 0, "local_rank": 0, "pid": 5,
                "world_size": 2, "restart_count": 0, "observed": True}]
    h = History(events=list(watched))
    assert run(no_fatal, h, no_fatal=True).status == "not_evaluated"     # no agent lines: no evidence
    h.agent_events = [{"ts": 2.0, "event": "rendezvous_done", "node": "node-0", "observed": True}]
    assert run(no_fatal, h, no_fatal=True).status == "passed"
    h.agent_events.append({"ts": 3.0, "event": "worker_group_failed", "node": "node-0", "observed": True,
                           "line": "Worker group FAILED. 3/3 attempts left"})
    res = run(no_fatal, h, no_fatal=True)
    assert res.status == "failed" and "Worker group FAILED" in res.reason
    h.agent_events = [{"ts": 2.0, "event": "launcher_exit", "node": "node-1", "exit_code": 1, "observed": True}]
    assert run(no_fatal, h, no_fatal=True).status == "failed"


def test_event_lines_with_wrong_types_fail_the_event_contract_instead_of_vanishing(tmp_path):
    from chaosbench.checks import evaluate
    (tmp_path / "events").mkdir()
    ok = {"ts": 1.0, "event": "step", "node": "node-0", "rank": 0, "local_rank": 0, "world_size": 1,
          "restart_count": 0, "step": 1}
    lines = [json.dumps(ok), json.dumps({**ok, "ts": 2.0, "step": "2"}), '{"ts": 3.0, "event": "st']   # torn last
    (tmp_path / "events" / "events-node-0-local0.jsonl").write_text("\n".join(lines))
    h = History.load(tmp_path)
    assert [e["step"] for e in h.events] == [1]
    _, results = evaluate(h, Expect(reaches_step=1))
    bad = [r for r in results if r.name == "event_contract"]
    assert len(bad) == 1 and bad[0].status == "failed"
    assert "events-node-0-local0.jsonl line 2: field 'step' is str" in bad[0].reason
    (tmp_path / "events" / "events-node-0-local0.jsonl").write_text("\n".join([lines[0], lines[2]]))
    _, results = evaluate(History.load(tmp_path), Expect(reaches_step=1))
    assert not [r for r in results if r.name == "event_contract"]     # a torn line is no contract breach


def test_reaches_step_without_any_step_says_what_it_needs():
    watched = {"ts": 1.0, "event": "worker_start", "node": "node-0", "rank": 0, "local_rank": 0, "pid": 5,
               "world_size": 1, "restart_count": 0, "observed": True}
    res = run(reaches_step, History(events=[watched]), reaches_step=5)
    assert res.status == "not_evaluated" and "trainer.progress" in res.reason


def test_an_event_line_without_ts_fails_the_event_contract_instead_of_crashing(tmp_path):
    """`ts` is required (docs/events.md): a line without it is left out and said, never a KeyError."""
    from chaosbench.checks import evaluate
    from .synth import node_loss
    h0 = node_loss()
    (tmp_path / "events").mkdir()
    lines = [json.dumps(e) for e in h0.events if e["node"] == "node-0"]
    lines.insert(3, json.dumps({"event": "checkpoint_saved", "node": "node-0", "rank": 0, "local_rank": 0,
                                "tier": "memory", "step": 3}))
    (tmp_path / "events" / "events-node-0-local0.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "faults.jsonl").write_text(json.dumps({"ts": h0.faults[0].injected_at, "id": "f1",
                                                       "action": "inject", "fault": "kill_node", "target": "node-2"}))
    h = History.load(tmp_path)
    assert all("ts" in e for e in h.events)
    _, results = evaluate(h, Expect(recovered_from="memory", max_lost_steps=5, reaches_step=10))
    (bad,) = [r for r in results if r.name == "event_contract"]
    assert bad.status == "failed" and "line 4: field 'ts' is missing" in bad.reason
