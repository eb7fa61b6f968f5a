"""The launcher seam: `trainer.launcher` picks one module of chaosbench/launchers/, which builds the node's
argv around the job and reads its own log lines into the node watcher's agent events."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chaosbench import launchers
from chaosbench.cli import app
from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.launch import node_plan, unprepared
from chaosbench.observer.node_watch import Watcher

runner = CliRunner()
BASE = """\
name: demo
cluster: {nodes: 2, elastic: {min_nodes: 1, max_nodes: 2}RDZV}
trainer: {launcher: LAUNCHER}
faults:
  - {at: {step: 20}, kill_node: {node: node-1}}
expect: {reaches_step: 40}
"""


def plan(tmp_path, node="node-1", **kw):
    spec = ClusterSpec(run_id="r1", run_dir=tmp_path, job_argv=["train.py", "--x"], workdir=str(tmp_path), **kw)
    spec.rdzv_timeouts = {"last_call_timeout": 0.5} if spec.launcher == "dlrover-run" else {}
    return node_plan(spec, node, python="py", rdzv_endpoint="node-0:29400", s3_url="http://s3", events_dir="/e",
                     nvme_dir="/n", memory_dir="/m")


def test_torchrun_argv_is_what_it_was(tmp_path):
    argv = unprepared(plan(tmp_path).argv)
    assert argv == ["py", "-m", "chaosbench.observer.node_watch", "--", "py", "-m", "torch.distributed.run",
                    "--nnodes=1:2", "--nproc-per-node=1", "--rdzv-backend=c10d", "--rdzv-endpoint=node-0:29400",
                    "--rdzv-id=r1", "--max-restarts=10", "--monitor-interval=0.1", "--rdzv-conf=is_host=false",
                    "--tee=3", "train.py", "--x"]


def test_ft_launcher_is_torchrun_s_argv_on_its_module_plus_its_own_flags(tmp_path):
    argv = unprepared(plan(tmp_path, launcher="ft_launcher", launcher_args=["--ft-rank-heartbeat-timeout=5"]).argv)
    at = argv.index("--")
    assert argv[:at] == ["py", "-m", "chaosbench.observer.node_watch", "--launcher=ft_launcher"]
    assert argv[at + 1:at + 4] == ["py", "-m", "nvidia_resiliency_ext.fault_tolerance.launcher"]
    assert "--rdzv-backend=c10d" in argv and argv[-3:] == ["--tee=3", "train.py", "--x"]
    assert argv.index("--ft-rank-heartbeat-timeout=5") < argv.index("train.py")


def test_dlrover_node_0_hosts_the_master_and_every_node_finds_it(tmp_path):
    p0, p1 = plan(tmp_path, node="node-0", launcher="dlrover-run"), plan(tmp_path, launcher="dlrover-run")
    a0, a1 = unprepared(p0.argv), unprepared(p1.argv)
    assert a0[a0.index("--") + 1:][:2] == ["sh", "-c"] and "dlrover.python.master.main" in a0[a0.index("--") + 3]
    assert "sh" not in a1 and "dlrover.trainer.torch.main" in a1
    assert a1[a1.index("--tee=3") - 1] == "--rdzv-conf=lastcall_timeout=1"   # DLRover's word, whole seconds
    assert p1.env["DLROVER_MASTER_ADDR"] == "node-0:29400" and p1.env["NODE_RANK"] == "1"
    assert p0.env["CB_DLROVER_PORT"] == "29400" and p0.env["CB_DLROVER_NODES"] == "2"


def test_reference_trainer_under_another_launcher_records_its_agent_lines_only(tmp_path):
    spec = ClusterSpec(run_id="r1", run_dir=tmp_path, launcher="ft_launcher")
    p = node_plan(spec, "node-0", python="py", rdzv_endpoint="node-0:1", s3_url="s", events_dir="/e",
                  nvme_dir="/n", memory_dir="/m")
    assert p.argv[:5] == ["py", "-m", "chaosbench.observer.node_watch", "--launcher=ft_launcher", "--agent-only"]
    assert "trainer.train" in p.argv and "trainer.warm_start" not in p.argv


FT_LOG = """\
[2026-11-28 09:38:10,618] [INFO] [ft_launcher18471@vm] [default] Rendezvous'ing worker group
[2026-11-28 09:38:11,741] [INFO] [ft_launcher18471@vm] [default] Rendezvous complete for workers. Result:
  restart_count=1
  master_addr=localhost
  group_rank=0
  group_world_size=2
  global_world_sizes=[2]

[2026-11-28 09:38:11,742] [INFO] [ft_launcher18471@vm] [default] Starting worker group
"""
DLROVER_LOG = """\
[2026-11-28 09:39:07,060] [INFO] [training.py:391:next_rendezvous] The node '' with rank 0 attempts to join the next round of the rendezvous elastic-training with timeout 600.
[2026-11-28 09:39:12,091] [INFO] [training.py:708:_rendezvous] [dlrover-trainer] Rendezvous complete for workers. Result:
  restart_count=1
  group_rank=0
  group_world_size=2
  global_world_sizes=[2]

[2026-11-28 09:39:12,098] [INFO] [training.py:968:_initialize_workers] Finish initializing training(ElasticTrainingAgent) workers.
"""
TORCHRUN_LOG = """\
I1128 09:38:10.618000 7 api.py:1] [default] Rendezvous'ing worker group
I1128 09:38:11.741000 7 api.py:2] [default] Rendezvous complete for workers. Result:
I1128 09:38:11.741000 7 api.py:2]   restart_count=1
I1128 09:38:11.741000 7 api.py:2]   group_world_size=2
I1128 09:38:11.741000 7 api.py:2]   global_world_sizes=[2]
I1128 09:38:11.741000 7 api.py:2]
"""


@pytest.mark.parametrize("launcher, log", [("ft_launcher", FT_LOG), ("torchrun", TORCHRUN_LOG),
                                           ("dlrover-run", DLROVER_LOG)])
def test_each_launcher_s_rendezvous_block_becomes_the_same_agent_events(tmp_path, launcher, log):
    w = Watcher(0, str(tmp_path), "node-0", None, launcher)
    for line in log.splitlines():
        w.line(line)
    rows = [json.loads(x) for x in (tmp_path / "agent-node-0.jsonl").read_text().splitlines()]
    assert [r["event"] for r in rows] == ["rendezvous_start", "rendezvous_done"]
    assert (rows[1]["restart_count"], rows[1]["nodes"], rows[1]["world_size"]) == (1, 2, 2)


def test_registry_names_every_launcher_and_refuses_others():
    assert launchers.NAMES[0] == "torchrun" and {"ft_launcher", "dlrover-run", "torchft"} <= set(launchers.NAMES)
    assert launchers.get("ft_launcher").requirements == ("nvidia-resiliency-ext==0.4.1",)
    assert launchers.get("dlrover-run").requirements == ("dlrover[torch]==0.6.1",)
    with pytest.raises(KeyError, match="use one of"):
        launchers.get("mpirun")


@pytest.mark.parametrize("launcher, rdzv, where, words", [
    ("dlrover", "", "3", ["'dlrover' is not a launcher", "use dlrover-run"]),
    ("dlrover-run", ", rendezvous: etcd-v3", "3", ["rendezvouses through c10d", "set cluster.rendezvous to c10d"]),
    ("ft_launcher", ", backend: slurm", "3", ["cannot run on backend slurm", "use local or docker"]),
    ("ft_launcher", ", backend: docker", "3", []),
])
def test_a_launcher_that_cannot_run_is_refused_up_front(tmp_path, launcher, rdzv, where, words):
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("LAUNCHER", launcher).replace("RDZV", rdzv))
    res = runner.invoke(app, ["validate", str(path)])
    out = " ".join(res.output.split())
    if not words:
        assert res.exit_code == 0, out
        return
    assert res.exit_code == 2 and f"{path}:{where}: trainer.launcher" in out, out
    assert all(w in out for w in words), out


def test_a_raw_command_cannot_take_a_launcher(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("{launcher: LAUNCHER}", "{command: [sh, -c, 'exit 0'], launcher: ft_launcher}")
                    .replace("RDZV", ""))
    res = runner.invoke(app, ["validate", str(path)])
    assert res.exit_code == 2 and "raw argv that starts its own launcher" in " ".join(res.output.split())


FT_HANG = """\
[2026-11-28 09:55:44,487] [WARNING] [RankMonServer17525@vm:0] Did not get subsequent heartbeat. Waited 2.00 seconds.
[2026-11-28 09:55:44,988] [WARNING] [RankMonServer17525@vm:0] FT timeout elapsed.
[2026-11-28 09:55:45,075] [INFO] [ft_launcher17474@vm] [default] Worker group FAILED. 10/10 attempts left; will restart worker group
"""


def test_ft_launcher_s_rank_monitor_timeout_is_one_hang_detection_with_its_reason(tmp_path):
    w = Watcher(0, str(tmp_path), "node-1", None, "ft_launcher")
    for line in FT_HANG.splitlines():
        w.line(line)
    rows = [json.loads(x) for x in (tmp_path / "agent-node-1.jsonl").read_text().splitlines()]
    assert [r["event"] for r in rows] == ["hang_detected", "worker_group_failed", "worker_group_restart"]
    assert "Did not get subsequent heartbeat" in rows[0]["reason"] and rows[0]["launcher"] == "ft_launcher"


def test_a_launcher_s_hang_detection_is_the_fault_s_detection(tmp_path):
    """hung_rank under ft_launcher: the rank monitor's timeout is the first sign, before any restart."""
    from chaosbench.checks.detection import first_sign
    from chaosbench.checks.history import History
    ev = tmp_path / "events"
    ev.mkdir()
    (ev / "events-node-0-local0.jsonl").write_text(json.dumps(
        {"ts": 99.0, "event": "step", "step": 1, "node": "node-0", "local_rank": 0, "rank": 0, "pid": 7}) + "\n")
    (ev / "agent-node-1.jsonl").write_text(json.dumps(
        {"ts": 102.2, "event": "hang_detected", "node": "node-1", "launcher": "ft_launcher"}) + "\n")
    (tmp_path / "faults.jsonl").write_text(json.dumps(
        {"ts": 100.0, "id": "f1", "action": "inject", "fault": "freeze_worker", "target": "node-1"}) + "\n")
    h = History.load(tmp_path)
    assert first_sign(h, h.faults[0], None) == (102.2, "ft_launcher agent hang_detected on node-1")


def test_the_reference_trainer_s_heartbeat_is_a_no_op_outside_ft_launcher(monkeypatch):
    from trainer.launcher_hooks import FT_SOCKET, FtHeartbeat
    monkeypatch.delenv(FT_SOCKET, raising=False)
    hb = FtHeartbeat()
    hb.beat()
    hb.close()
    assert hb.client is None


def test_versions_are_the_pins_and_torch_s_for_torchrun():
    import torch
    assert launchers.get("ft_launcher").version() == "0.4.1"
    assert launchers.get("dlrover-run").version() == "0.6.1"
    assert launchers.get("torchrun").version() == torch.__version__.split("+")[0]


def test_an_ft_launcher_node_loss_is_told_its_keep_alive_is_fixed_not_to_use_etcd_v3():
    """A stored local node_loss under ft_launcher (c10d, last call 2 s): 19.5 s of its 20.9 s recovery was the
    rendezvous waiting out ft_launcher's keep-alive, which no rdzv_timeouts setting reaches."""
    from chaosbench.diagnosis import diagnose
    run = Path(__file__).parent / "data" / "ft_node_loss"
    (f,) = [f for f in diagnose(run).findings if f.rule == "rdzv_keepalive_default"]
    assert "fixed at 5 s x 3" in f.title and "last call 2 s" in f.title, f.title
    assert "reads no keep-alive setting" in f.fix and "etcd-v3 rendezvous (liveness" not in f.fix


def test_dlrover_run_s_tee_prefix_is_a_worker_line(tmp_path):
    """dlrover-run's role is `dlrover-trainer`: its --tee prefix `[dlrover-trainer1]:` is local rank 1's output."""
    w = Watcher(0, str(tmp_path), "node-0", r"step (?P<step>\d+)", "dlrover-run")
    w.workers[7] = {"node": "node-0", "rank": 3, "local_rank": 1, "world_size": 4, "restart_count": 0, "pid": 7,
                    "run_id": "r"}
    w.line("[dlrover-trainer1]:step 12 loss 0.5")
    (row,) = [json.loads(x) for x in (tmp_path / "events-node-0-local1-observed.jsonl").read_text().splitlines()]
    assert (row["step"], row["rank"]) == (12, 3) and w.prefixed


def test_the_frameworks_bench_runs_each_library_scenario_under_each_launcher_as_a_valid_scenario(tmp_path):
    import importlib
    import sys
    from chaosbench.scenario import load_scenario
    bench = str(Path(__file__).parents[2] / "bench")
    sys.path.insert(0, bench)
    try:
        frameworks = importlib.import_module("frameworks")
    finally:
        sys.path.remove(bench)
    for name in frameworks.SCENARIOS:
        for launcher in frameworks.LAUNCHERS:
            s = load_scenario(frameworks.derived(name, launcher, "local", tmp_path))
            assert s.trainer.launcher == launcher
            assert launcher == "torchrun" or s.cluster.rendezvous == "c10d"
    rows = [{"base": "node_loss", "case": "torchrun", "verdict": "passed", "total_s": 1.0},
            {"base": "node_loss", "case": "ft_launcher", "verdict": "passed", "total_s": 20.9, "version": "0.4.1"}]
    assert "| node_loss | ft_launcher 0.4.1 | passed | - | - | - | - | 20.9 (x20.90) |" in frameworks.table(rows)
