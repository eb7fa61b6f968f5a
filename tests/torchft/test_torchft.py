"""torchft under chaosbench without torchft installed: the launcher's argv and env, the Lighthouse beside the
other services in the compose project, and the log adapter on lines torchft 0.2.0 printed in a real run."""
from __future__ import annotations

import ipaddress

from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.docker.compose_file import ComposePlan, render, services_for
from chaosbench.cluster.launch import node_plan, unprepared
from chaosbench.launchers.torchft import TorchftAdapter
from chaosbench.services import lighthouse

# as torchft 0.2.0's Manager logged them in a two-group run (tests were cut from the real lines)
QUORUM = ('2026-11-28T09:40:02.236 [INFO] [torchft::manager] - [Replica job_0] got lighthouse quorum '
          'LighthouseQuorumResponse { quorum: Some(Quorum { quorum_id: QID, participants: [MEMBERS], created: '
          'Some(Timestamp { seconds: 1795858802, nanos: 235 }) }) }')
MEMBER = ('QuorumMember { replica_id: "train_ddp_N:d1521872-5dd5", address: "http://vm:39255", store_address: '
          '"127.0.0.1:29502", step: STEP, world_size: 1, shrink_only: false, commit_failures: 0, data: "" }')
FETCHED = ("2026-11-28 09:40:26,480 torchft.checkpointing.http_transport INFO fetching checkpoint from "
           "http://vm:41821/checkpoint/278/full took 0.01137817000000041s")
HEAL = ("2026-11-28 09:40:26,468 torchft.manager INFO [job_1:950db739/0 - step 0] healing required, fetching "
        "checkpoint metadata from recover_src_manager_address='http://vm:39255' max_step=278")


def quorum(qid: int, *steps_by_group: tuple[int, int]) -> str:
    members = ", ".join(MEMBER.replace("N", str(g)).replace("STEP", str(s)) for g, s in steps_by_group)
    return QUORUM.replace("QID", str(qid)).replace("MEMBERS", members)


def spec(tmp_path, **kw) -> ClusterSpec:
    return ClusterSpec(run_id="r1", run_dir=tmp_path, nodes=2, min_nodes=1, max_nodes=2, launcher="torchft",
                       job_argv=["train_ddp.py"], workdir=str(tmp_path), **kw)


def test_each_node_is_one_replica_group_under_its_own_torchrun(tmp_path):
    p = node_plan(spec(tmp_path), "node-1", python="py", rdzv_endpoint="10.0.0.5:29510", s3_url="http://s3",
                  events_dir="/e", nvme_dir="/n", memory_dir="/m")
    argv = unprepared(p.argv)
    assert argv[:4] == ["py", "-m", "chaosbench.observer.node_watch", "--launcher=torchft"]
    run = argv[argv.index("--") + 1:]
    assert run[:6] == ["py", "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=1"]
    assert not any(a.startswith("--rdzv") for a in run)   # no cross-node rendezvous: the Lighthouse's quorum
    assert p.env["TORCHFT_LIGHTHOUSE"] == "http://10.0.0.5:29510"
    assert p.env["REPLICA_GROUP_ID"] == "1" and p.env["NUM_REPLICA_GROUPS"] == "2"
    assert p.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"   # the Manager joins torchrun's own store


def test_the_lighthouse_runs_beside_the_services_from_the_job_image(tmp_path):
    s = spec(tmp_path)
    plan = ComposePlan(project="cbt", image="img:1", subnet=ipaddress.ip_network("10.222.5.0/24"), owner="o",
                       events_host_dir=str(tmp_path / "events"), job_image="job:1")
    doc = render(plan, s, ["node-0", "node-1"])
    lh = doc["services"]["lighthouse"]
    assert services_for(s) == ("etcd", "toxiproxy", "s3", "lighthouse")
    assert lh["image"] == "job:1" and lh["networks"]["net"]["ipv4_address"] == "10.222.5.5"
    assert lh["command"][:3] == ["python", "-m", "chaosbench.services.lighthouse"]
    assert any(k.endswith(".owner") and v == "o" for k, v in lh["labels"].items())   # swept by `chaosbench clean`
    assert doc["services"]["node-1"]["environment"]["TORCHFT_LIGHTHOUSE"] == f"http://10.222.5.5:{lighthouse.PORT}"
    plain = ClusterSpec(run_id="r1", run_dir=tmp_path, nodes=2)
    assert "lighthouse" not in render(plan, plain, ["node-0", "node-1"])["services"]


def test_quorum_changes_are_events_once_each_and_heals_are_timed():
    a = TorchftAdapter()
    got = [ev for line in (quorum(1, (0, 0)), quorum(2, (0, 2), (1, 2)), quorum(2, (0, 3), (1, 3)),
                           quorum(3, (0, 163)), HEAL, FETCHED, "[INFO] Loaded state dict.")
           for ev in a.worker_line(line)]
    assert got[1][1].pop("ids") == ["train_ddp_0:d1521872-5dd5", "train_ddp_1:d1521872-5dd5"]   # a restart: new id
    for _, fields in got:
        fields.pop("ids", None)
    assert got == [("quorum_change", {"quorum_id": 1, "replicas": 1, "members": ["train_ddp_0"], "max_step": 0}),
                   ("quorum_change", {"quorum_id": 2, "replicas": 2, "members": ["train_ddp_0", "train_ddp_1"],
                                      "max_step": 2}),
                   ("quorum_change", {"quorum_id": 3, "replicas": 1, "members": ["train_ddp_0"], "max_step": 163}),
                   ("heal_start", {"step": 278, "peer": "http://vm:39255"}),
                   ("heal_done", {"fetch_s": 0.0114})]
    # unprefixed lines (a job without --tee) reach the adapter as agent lines: the same events
    b = TorchftAdapter()
    assert [e for e, _ in b.line(quorum(4, (0, 5)))] == ["quorum_change"]


def test_the_lighthouse_service_says_what_it_needs_without_torchft(monkeypatch, capsys):
    import builtins
    real = builtins.__import__

    def no_torchft(name, *a, **kw):
        if name.startswith("torchft"):
            raise ImportError("No module named 'torchft'")
        return real(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", no_torchft)
    assert lighthouse.main(["--port", "0"]) == 2
    assert "trainer.launcher torchft installs it" in capsys.readouterr().err


def test_a_torchft_run_gets_no_torchrun_rendezvous_advice():
    """The stored docker node-loss run: its 15.6 s to the returning group's first step is node restart, imports
    and the heal, not torchrun's keep-alive (each group's torchrun is single-node)."""
    from pathlib import Path

    from chaosbench.diagnosis import diagnose
    run = Path(__file__).parents[1] / "mutation" / "data" / "torchft_node_loss"
    assert "rdzv_keepalive_default" not in {f.rule for f in diagnose(run).findings}


def test_the_reference_trainer_runs_in_torchft_s_idiom_and_the_torchrun_path_never_imports_torchft(tmp_path):
    import ast
    from pathlib import Path
    s = ClusterSpec(run_id="r1", run_dir=tmp_path, nodes=2, min_nodes=1, max_nodes=2, launcher="torchft")
    argv = unprepared(node_plan(s, "node-0", python="py", rdzv_endpoint="lh:29510", s3_url="http://s3", events_dir="/e",
                                nvme_dir="/n", memory_dir="/m").argv)
    assert "--agent-only" in argv and argv[argv.index("-m", argv.index("--standalone")) + 1] == "trainer.torchft_train"
    root = Path(__file__).parents[2] / "trainer"
    for f in root.rglob("*.py"):
        if f.name == "torchft_train.py":
            continue
        names = {n.names[0].name if isinstance(n, ast.Import) else (n.module or "")
                 for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))}
        assert not any(x.split(".")[0] == "torchft" or x.endswith("torchft_train") for x in names), f


def _history(healed_at=None, survivor_restart=False, grows=False):
    from chaosbench.checks.history import FaultWindow, History

    def step(node, pid, s):
        return {"ts": float(s), "event": "step", "node": node, "rank": 0, "local_rank": 0, "world_size": 1,
                "restart_count": 0, "pid": pid, "step": s, "observed": True}
    events = [step("node-0", 99 if survivor_restart and s > 12 else 1, s) for s in range(1, 30)]
    events += [step("node-1", 2, s) for s in range(1, 6)]
    agent = [{"ts": 0.5, "event": "quorum_change", "node": "node-0", "replicas": 2},
             {"ts": 11.0, "event": "quorum_change", "node": "node-0", "replicas": 1}]
    if grows:
        agent += [{"ts": 20.0, "event": "heal_start", "node": "node-1", "step": 19},
                  {"ts": 20.1, "event": "heal_done", "node": "node-1", "fetch_s": 0.01},
                  {"ts": 20.2, "event": "quorum_change", "node": "node-0", "replicas": 2}]
    faults = [FaultWindow(id="f1", fault="kill_node", target="node-1", params={"node": "node-1"}, injected_at=6.0,
                          healed_at=healed_at)]
    return History(events=events, agent_events=agent, faults=faults)


def test_quorum_recovery_judges_shrink_growth_heal_and_survivors():
    from chaosbench.checks.quorum import quorum_recovery
    from chaosbench.scenario.model import Expect
    e = Expect(quorum_recovery=True)
    lost = quorum_recovery(_history(), e, [])
    assert lost.status == "passed" and "lost for good" in lost.reason
    assert quorum_recovery(_history(healed_at=16.0), e, []).status == "failed"   # came back, never rejoined
    back = quorum_recovery(_history(healed_at=16.0, grows=True), e, [])
    assert back.status == "passed" and "state fetched in 0.010 s" in back.reason
    assert quorum_recovery(_history(healed_at=16.0, grows=True), Expect(max_heal_seconds=5), []).status == "failed"
    restarted = quorum_recovery(_history(survivor_restart=True), e, [])
    assert restarted.status == "failed" and "node-0/local0" in restarted.reason
    assert quorum_recovery(_history(), Expect(), []) is None


def _healed_run(behind=0):
    """Two groups, a step each 0.1 s; node-1 is lost at 4.05 (after step 40) and back at 14.0. node-0 never restarts:
    its quorum drops node-1 at 9.1 and it trains on; node-1's new process heals at 16.05 to node-0's step 160 (or,
    `behind` > 0, to a stale step that many behind) and both train on to step 200."""
    from chaosbench.checks.history import FaultWindow, History

    def ev(t, event, node, pid, **kw):
        return {"ts": t, "event": event, "node": node, "rank": 0, "local_rank": 0, "world_size": 1,
                "restart_count": 0, "pid": pid, **kw}
    events = [ev(0.01, "checkpoint_fresh_start", "node-0", 1), ev(0.01, "checkpoint_fresh_start", "node-1", 2)]
    events += [ev(0.1 * s, "step", "node-0", 1, step=s) for s in range(1, 201)]
    events += [ev(0.1 * s, "step", "node-1", 2, step=s) for s in range(1, 41)]
    events += [ev(15.0, "phase", "node-1", 3, phase="training"),
               ev(16.08, "checkpoint_loaded", "node-1", 3, step=160 - behind, tier="memory", source="peer", live=True)]
    events += [ev(0.1 * s + 0.002, "step", "node-1", 3, step=s - behind) for s in range(161, 201)]
    agent = [{"ts": 0.5, "event": "quorum_change", "node": "node-0", "replicas": 2, "ids": ["a", "b"]},
             {"ts": 9.1, "event": "quorum_change", "node": "node-0", "replicas": 1, "ids": ["a"]},
             {"ts": 16.05, "event": "heal_start", "node": "node-1", "step": 160 - behind},
             {"ts": 16.07, "event": "heal_done", "node": "node-1"},
             {"ts": 16.05, "event": "quorum_change", "node": "node-0", "replicas": 2, "ids": ["a", "c"]}]
    faults = [FaultWindow(id="f1", fault="kill_node", target="node-1", params={"node": "node-1"}, injected_at=4.05,
                          healed_at=14.0)]
    return History(events=sorted(events, key=lambda e: e["ts"]), agent_events=agent, faults=faults,
                   harness={"training_started_at": 0.0, "stopped_at": 21.0})


def test_a_survivor_that_trains_on_loses_nothing_and_the_quorum_shrink_is_the_detection():
    from chaosbench.checks.detection import max_detection_seconds
    from chaosbench.checks.quorum import quorum_recovery
    from chaosbench.checks.recovery import recoveries
    from chaosbench.scenario.model import Expect
    h = _healed_run()
    (rec,) = recoveries(h)
    # the world's step at the heal is node-0's 160 (not the 200 it reached later), and node-1 took it up
    assert (rec.step_before_fault, rec.restored_step, rec.lost_steps) == (160, 160, 0)
    assert rec.detected_at == 9.1 and rec.detection_s == 5.05
    (det,) = max_detection_seconds(h, Expect(max_detection_seconds=10), [])   # read from the quorum itself
    assert det.status == "passed" and det.observed == 5.05 and "torchft quorum 2 -> 1 on node-0" in det.reason
    assert quorum_recovery(h, Expect(quorum_recovery=True), [rec]).status == "passed"


def test_a_group_that_heals_behind_the_world_fails_quorum_recovery():
    from chaosbench.checks.quorum import quorum_recovery
    from chaosbench.checks.recovery import recoveries
    from chaosbench.scenario.model import Expect
    h = _healed_run(behind=30)
    (rec,) = recoveries(h)
    assert rec.lost_steps == 30
    res = quorum_recovery(h, Expect(quorum_recovery=True), [rec])
    assert res.status == "failed" and "resumed at step 131 while the world had reached step 160" in res.reason


class _Quorum:
    """The one thing allreduce_grads asks of torchft's Manager: allreduce(t) -> a work whose wait() averages t with
    the other group's tensor, or (failed: the peer died in it) reports the error and returns False."""

    def __init__(self, peer, fails=False):
        self.peer, self.fails, self.calls = peer, fails, 0

    def allreduce(self, t):
        self.calls += 1
        quorum = self

        class Work:
            def wait(self):
                if quorum.fails:
                    return False
                t.add_(quorum.peer).div_(2)
                return True
        return Work()


def test_the_reference_trainer_averages_gradients_with_one_manager_allreduce_and_survives_a_failed_one():
    import ast
    from pathlib import Path

    import torch

    from trainer.torchft_train import allreduce_grads
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    m(torch.ones(1, 3)).sum().backward()
    mine = [p.grad.clone() for p in m.parameters()]
    peer = torch.cat([torch.full_like(g, 3.0).reshape(-1) for g in mine])
    q = _Quorum(peer)
    assert allreduce_grads(q, m.parameters()) and q.calls == 1
    for got, own in zip((p.grad for p in m.parameters()), mine):
        assert got.shape == own.shape and torch.allclose(got, (own + 3.0) / 2)
    assert allreduce_grads(_Quorum(peer, fails=True), m.parameters()) is False   # no exception: the step won't commit
    src = (Path(__file__).parents[2] / "trainer" / "torchft_train.py").read_text()
    names = {a.name for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert "DistributedDataParallel" not in names   # torchft 0.2.0's DDP asserts when a peer dies mid-allreduce


def test_liveness_sees_a_survivor_that_stalls_after_its_peer_group_is_lost_for_good():
    """A group lost for good leaves its round without world steps (each needs every member's report): the quorum's
    track is read from every group's steps, so the survivor standing still for 60 s after the fault is seen."""
    from chaosbench.checks.invariants import liveness
    from chaosbench.scenario.model import Expect
    h = _healed_run()
    h.events = [e for e in h.events if e["pid"] != 3]   # node-1 never comes back
    h.agent_events = [a for a in h.agent_events if a["ts"] < 10]
    h.faults[0].healed_at = None
    assert liveness(h, Expect()).status == "passed"
    for e in h.events:
        if e["node"] == "node-0" and e.get("step", 0) > 60:
            e["ts"] += 60.0
    res = liveness(h, Expect())
    assert res.status == "failed" and "after step 60" in res.reason
