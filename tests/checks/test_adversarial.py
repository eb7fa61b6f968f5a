"""Hand-made adversarial histories, one or more per `expect:` key: each passed before the checks
judged restores rank by rank, held claims against the harness's evidence and gave every fault a
verdict; each must fail (or be not evaluated) now, with the reason."""
import pytest

from chaosbench.checks import evaluate
from chaosbench.checks.history import FaultWindow, History
from chaosbench.evidence.inventory import take_inventory
from chaosbench.checks.recovery import recoveries
from chaosbench.scenario.model import Expect

from .synth import T0, no_fault, node_loss


def check(h: History, name: str, **expect):
    _, results = evaluate(h, Expect(**expect))
    return next(r for r in results if r.name == name)


def loads(h: History):
    return [e for e in h.events if e["event"] == "checkpoint_loaded"]


def rank1_fresh(h: History) -> History:
    """rank 1 of the restart round starts fresh while rank 0 loads."""
    (e,) = [x for x in loads(h) if x["rank"] == 1]
    e["event"] = "checkpoint_fresh_start"
    for k in ("tier", "step", "source"):
        e.pop(k)
    return h


# -- recovered_from / resumed_at_step --------------------------------------------------------------
def test_recovered_from_fails_for_a_fresh_start_beside_a_load():
    r = check(rank1_fresh(node_loss()), "recovered_from", recovered_from="memory")
    assert r.status == "failed" and "fresh start on node-1/local0" in r.reason


def test_recovered_from_fails_for_ranks_restoring_different_steps():
    h = node_loss(restored=8)
    for e in h.events:
        if e["event"] == "checkpoint_loaded" and e["rank"] == 1:
            e["step"] = 2
    r = check(h, "recovered_from", recovered_from="memory", resumed_at_step=8)
    assert r.status == "failed" and "ranks restored different steps" in r.reason


def test_recovered_from_fails_for_a_tierless_load_beside_a_tiered_one():
    h = node_loss()
    loads(h)[1].pop("tier")
    r = check(h, "recovered_from", recovered_from="memory")
    assert r.status == "failed" and "without 'tier'" in r.reason


def test_recovered_from_fails_when_a_rank_of_the_round_logs_no_restore():
    h = node_loss()
    h.events.remove(loads(h)[1])
    r = check(h, "recovered_from", recovered_from="memory")
    assert r.status == "failed" and "no checkpoint_loaded or checkpoint_fresh_start from node-1" in r.reason


def test_recovered_from_fails_a_load_the_trainer_says_failed_its_checksum():
    h = node_loss()
    loads(h)[0]["checksum_ok"] = False
    r = check(h, "recovered_from", recovered_from="memory")
    assert r.status == "failed" and "checksum_ok=false on node-0/local0" in r.reason


def test_recovered_from_is_not_evaluated_without_any_restore_event_and_names_it():
    h = node_loss()
    for e in loads(h):
        h.events.remove(e)
    r = check(h, "recovered_from", recovered_from="memory")
    assert r.status == "not_evaluated" and "emit checkpoint_loaded" in r.reason


def test_recovered_from_fails_a_claim_the_harness_saw_corrupt():
    h = node_loss()
    h.inventories["f1"] = {"checkpoints": [
        {"node": n + "/memory", "tier": "memory", "dir": "step-00000040", "step": 40, "published": True,
         "valid": False, "reason": "checksum mismatch"} for n in ("node-0", "node-1")]}
    r = check(h, "recovered_from", recovered_from="memory")
    assert r.status == "failed" and "found it invalid right after f1 acted" in r.reason


def test_recovered_from_fails_a_claim_with_no_evidence():
    h = node_loss()
    h.events = [e for e in h.events if not (e["event"] == "checkpoint_saved" and e["step"] == 40)]
    h.inventories["f1"] = {"checkpoints": []}
    r = check(h, "recovered_from", recovered_from="memory")
    assert r.status == "failed" and "node-0/local0 claims memory@40" in r.reason and "no such checkpoint" in r.reason


def test_recovered_from_accepts_a_claim_backed_only_by_the_inventory(tmp_path):
    from .test_run_checks import _ckpt
    for n in ("node-0", "node-1"):
        _ckpt(tmp_path / n, 40)
    h = node_loss()
    h.events = [e for e in h.events if e["event"] != "checkpoint_saved"]
    h.inventories["f1"] = take_inventory({f"{n}/memory": ("memory", tmp_path / n) for n in ("node-0", "node-1")})
    assert check(h, "recovered_from", recovered_from="memory").status == "passed"


def test_recovered_from_names_a_fault_that_caused_no_restart():
    h = node_loss()
    h.faults.insert(0, FaultWindow("full", "fill_nvme", "node-1", {}, T0 + 1.0))
    r = check(h, "recovered_from", recovered_from="memory")
    assert r.status == "passed" and "full (fill_nvme) caused no worker restart" in r.reason


# -- max_lost_steps ----------------------------------------------------------------------------------
def test_max_lost_steps_fails_an_impossible_restore_instead_of_clamping():
    """Claims step 999 when the last step was 42, then trains from step 1: 0 lost before."""
    h = node_loss(restored=0)
    for e in loads(h):
        e["step"] = 999
    (rec,) = recoveries(h)
    assert rec.lost_steps == 42 - 999
    r = check(h, "max_lost_steps", max_lost_steps=5)
    assert r.status == "failed" and "above the last step before the fault (42)" in r.reason
    assert "restored 999 but first trained step 1" in r.reason


def test_max_lost_steps_counts_from_the_lowest_restored_step():
    h = node_loss(restored=40)
    loads(h)[1]["step"] = 20
    (rec,) = recoveries(h)
    assert rec.restored_step == 20 and rec.lost_steps == 22
    assert check(h, "max_lost_steps", max_lost_steps=5).status == "failed"


def test_max_lost_steps_fails_a_fresh_start_beside_a_load():
    r = check(rank1_fresh(node_loss()), "max_lost_steps", max_lost_steps=5)
    assert r.status == "failed" and "fresh start on node-1/local0" in r.reason


# -- max_recovery_seconds ----------------------------------------------------------------------------
def test_max_recovery_seconds_counts_a_fault_that_stalled_training_without_a_restart():
    """f1 restarts the workers and they train again 3 s later; `late` restarts nothing but stalls
    every rank for 6 s: the bound of 5 s fails on `late`, and so does late's own verdict."""
    h = node_loss(steps_after=100)
    h.events = [e for e in h.events if not (e["event"] == "step" and T0 + 8.0 <= e["ts"] < T0 + 14.0)]
    h.faults.append(FaultWindow("late", "pause_node", "node-1", {}, T0 + 8.0, T0 + 13.9))
    planned(h, ("f1", "kill_node", None), ("late", "pause_node", 5.9))
    r = check(h, "max_recovery_seconds", max_recovery_seconds=5)
    assert r.status == "failed" and r.observed == pytest.approx(6.0, abs=0.15), r.reason
    assert "late: no restart; longest time without a step after it 6.0" in r.reason
    f = check(h, "fault:late", max_recovery_seconds=5)
    assert f.status == "failed" and "training resumed only after 6" in f.reason
    assert check(h, "fault:f1", max_recovery_seconds=5).status == "passed"


# -- world_size_after / world_sizes ------------------------------------------------------------------
def test_world_size_after_fails_when_fewer_ranks_trained_than_claimed():
    h = node_loss()
    h.events = [e for e in h.events if not (e["restart_count"] == 1 and e["node"] == "node-1")]
    for e in h.events:
        if e["restart_count"] == 1:
            e["world_size"] = 2
    r = check(h, "world_size_after", world_size_after=2)
    assert r.status == "failed" and "1 rank(s) trained" in r.reason


def test_world_sizes_fails_when_a_size_is_claimed_by_fewer_ranks():
    h = node_loss()
    h.events = [e for e in h.events if not (e["restart_count"] == 1 and e["node"] == "node-1")]
    r = check(h, "world_sizes", world_sizes=[3, 2])
    assert r.status == "failed" and "world size 2 claimed while 1 rank(s) trained" in r.reason


# -- reaches_step / within_seconds / no_restart / no_fatal: a fault that never acted -----------------
def planned(h: History, *plans) -> History:
    h.harness["faults_planned"] = [{"id": i, "type": t, "trigger": "at step 20", "healable": d is not None,
                                    "heal_after_s": d} for i, t, d in plans]
    return h


@pytest.mark.parametrize("key,expect", [("reaches_step", {"reaches_step": 40}),
                                        ("within_seconds", {"reaches_step": 40, "within_seconds": 60}),
                                        ("no_restart", {"no_restart": True}),
                                        ("no_fatal", {"no_fatal": True})])
def test_a_check_passing_around_a_fault_that_never_fired_fails_the_run(key, expect):
    """A kill that never fired plus a 60-s pause healed after 0.5 s: the run must not pass."""
    h = planned(no_fault(), ("kill", "kill_node", None), ("pause", "pause_node", 60.0))
    h.faults = [FaultWindow("pause", "pause_node", "node-1", {}, T0 + 2.0, T0 + 2.5)]
    _, results = evaluate(h, Expect(**expect))
    by = {r.name: r for r in results}
    assert by[key.replace("within_seconds", "reaches_step")].status == "passed"
    assert by["fault:kill"].status == "failed" and "never injected" in by["fault:kill"].reason
    assert by["fault:pause"].status == "failed" and "0.5 s of its planned 60 s" in by["fault:pause"].reason
    assert any(r.blocking for r in results)


def test_an_outage_never_healed_fails():
    h = planned(no_fault(), ("out", "s3_outage", 20.0))
    h.faults = [FaultWindow("out", "s3_outage", "s3", {}, T0 + 2.0)]
    r = check(h, "fault:out", no_restart=True)
    assert r.status == "failed" and "never healed" in r.reason


# -- loss_continuity ---------------------------------------------------------------------------------
def test_loss_continuity_fails_when_a_restart_never_trained():
    h = node_loss(steps_after=0)
    h.faults.append(FaultWindow("f0", "kill_node", "node-1", {}, T0 + 1.0))
    h.faults.sort(key=lambda w: w.injected_at)
    r = check(h, "loss_continuity", loss_continuity=True)
    assert r.status == "failed"


# -- checkpoints_valid -------------------------------------------------------------------------------
def test_checkpoints_valid_sees_a_corrupt_dir_holding_a_stray_temp_file(tmp_path):
    from .test_run_checks import _ckpt
    _ckpt(tmp_path, 20)
    _ckpt(tmp_path, 40, corrupt=True)
    (tmp_path / "step-00000040" / "state.pt.tmp").write_bytes(b"x")
    h = History(inventory=take_inventory({"node-0/nvme": ("nvme", tmp_path)}))
    r = check(h, "checkpoints_valid", checkpoints_valid=True)
    assert r.status == "failed" and "step-00000040 (checksum mismatch" in r.reason


def test_checkpoints_valid_sees_an_empty_published_dir(tmp_path):
    from .test_run_checks import _ckpt
    _ckpt(tmp_path, 20)
    (tmp_path / "step-00000040").mkdir()
    h = History(inventory=take_inventory({"node-0/nvme": ("nvme", tmp_path)}))
    r = check(h, "checkpoints_valid", checkpoints_valid=True)
    assert r.status == "failed" and "step-00000040 (empty published directory)" in r.reason


def test_checkpoints_valid_and_corrupt_checkpoint_skip_the_fill_file(tmp_path):
    """fill_nvme's ballast is .chaosbench-fill: neither a bad checkpoint nor what to corrupt."""
    import os
    from chaosbench.faults.storage import newest_checkpoint_file
    from .test_run_checks import _ckpt
    _ckpt(tmp_path, 20)
    fill = tmp_path / ".chaosbench-fill"
    fill.write_bytes(b"\0" * 4096)
    os.utime(fill, (T0 + 10, T0 + 10))                 # written after the checkpoint, and larger
    h = History(inventory=take_inventory({"node-0/nvme": ("nvme", tmp_path)}))
    assert check(h, "checkpoints_valid", checkpoints_valid=True).status == "passed"
    assert newest_checkpoint_file(tmp_path).name == "state.pt"


def test_checkpoints_valid_says_what_it_could_not_see(tmp_path):
    from .test_run_checks import _ckpt
    _ckpt(tmp_path, 20)
    inv = take_inventory({"node-0/nvme": ("nvme", tmp_path)},
                         unseen={"node-1/memory": ("memory", "node-1 is not running")},
                         s3={"unseen": [{"node": "s3", "tier": "s3", "reason": "endpoint down"}]})
    r = check(History(inventory=inv), "checkpoints_valid", checkpoints_valid=True)
    assert r.status == "passed" and "could not see node-1/memory (node-1 is not running), s3/s3 (endpoint down)" \
        in r.reason
    only_blind = take_inventory({}, unseen={"node-0/nvme": ("nvme", "no host path")})
    r = check(History(inventory=only_blind), "checkpoints_valid", checkpoints_valid=True)
    assert r.status == "not_evaluated" and "no host path" in r.reason


def test_checkpoints_valid_inventories_s3(tmp_path):
    moto = pytest.importorskip("moto.server")
    import boto3
    from chaosbench.evidence.inventory_s3 import s3_inventory
    from trainer.checkpoint.fmt import checksum, make_manifest
    server = moto.ThreadedMotoServer(port=0, verbose=False)
    server.start()
    try:
        url = f"http://127.0.0.1:{server._server.server_port}"
        s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
        s3.create_bucket(Bucket="chaosbench")
        for step, data in ((30, b"good"), (60, b"torn")):
            man = make_manifest(step, b"good", checksum(b"good", "crc32"))
            s3.put_object(Bucket="chaosbench", Key=f"checkpoints/r/step-{step:010d}/state.pt", Body=data)
            s3.put_object(Bucket="chaosbench", Key=f"checkpoints/r/step-{step:010d}/manifest.json",
                          Body=__import__("json").dumps(man).encode())
        inv = take_inventory({}, s3=s3_inventory(url, "chaosbench"))
    finally:
        server.stop()
    r = check(History(inventory=inv), "checkpoints_valid", checkpoints_valid=True)
    assert r.status == "failed" and "s3:checkpoints/r/step-0000000060 (checksum mismatch" in r.reason
    assert [c["step"] for c in inv["checkpoints"] if c["valid"]] == [30]


# -- log_regex ---------------------------------------------------------------------------------------
def test_log_regex_for_node_1_does_not_read_node_10():
    h = no_fault()
    h.logs = {"node-1.log": "all fine", "node-10.log": "[NVME] No space left on device"}
    r = check(h, "log_regex:\\[NVME\\]", log_regex=[{"pattern": "\\[NVME\\]", "node": "node-1"}])
    assert r.status == "failed"


def test_log_regex_absent_over_an_empty_log_is_not_evaluated():
    h = no_fault()
    h.logs = {"node-0.log": ""}
    r = check(h, "log_regex:Traceback", log_regex=[{"pattern": "Traceback", "expect": "absent", "node": "node-0"}])
    assert r.status == "not_evaluated" and "empty" in r.reason


# -- optional ----------------------------------------------------------------------------------------
def test_optional_does_not_hide_an_inconsistent_restore():
    h = rank1_fresh(node_loss())
    _, results = evaluate(h, Expect(recovered_from="memory", optional=["recovered_from"]))
    (r,) = [x for x in results if x.name == "recovered_from"]
    assert r.status == "failed" and r.blocking


def test_first_step_must_follow_the_restored_step():
    h = node_loss(restored=40)
    for e in h.events:
        if e["event"] == "step" and e["restart_count"] == 1:
            e["step"] += 5                          # claims 40, trains from 46
    r = check(h, "recovered_from", recovered_from="memory")
    assert r.status == "failed" and "restored 40 but first trained step 46" in r.reason


def test_ranks_reporting_different_world_sizes_fail():
    h = node_loss()
    for e in h.events:
        if e["restart_count"] == 1 and e["node"] == "node-1":
            e["world_size"] = 3
    assert check(h, "world_size_after", world_size_after=2).status == "failed"

