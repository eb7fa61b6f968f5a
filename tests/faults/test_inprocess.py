"""Cooperative faults: the command they deliver, how they resolve their rank, and what a scenario
may ask of them (refused at load with the file, line and field)."""
import json
import random
import stat
from pathlib import Path

import pytest

from chaosbench.cluster.base import Cluster, ClusterSpec
from chaosbench.cluster.errors import UnsupportedFault
from chaosbench.faults import FaultContext, FaultLog, get_fault
from chaosbench.faults.inprocess import is_cooperative
from chaosbench.scenario import ScenarioError
from chaosbench.scenario.loader import load_scenario


class Box(Cluster):
    """A backend with nothing behind it: only the base's own send_job_command is exercised."""
    backend = "box"

    def start_training(self): pass
    def node_status(self, node): return "running"
    def collect(self): pass


def box(tmp_path: Path, nodes=2, ppn=1) -> Box:
    c = Box(ClusterSpec(run_id="run-7", run_dir=tmp_path, nodes=nodes, procs_per_node=ppn))
    c.events_dir.mkdir(parents=True)
    return c


def fault(kind: str, params: dict, cluster, tmp_path: Path, fid="f1", seed="0:f1:target"):
    cls = get_fault(kind)
    ctx = FaultContext(cluster=cluster, log=FaultLog(tmp_path / "faults.jsonl"), rng=random.Random(seed))
    return cls(fid, cls.Params.model_validate(params), ctx)


# -- the channel ------------------------------------------------------------------------------------
def test_the_command_is_one_json_file_renamed_into_place(tmp_path):
    c = box(tmp_path)
    path = c.send_job_command("f1#2", {"fault": "worker_error", "rank": 1, "at_step": 30, "params": {"kind": "cuda"}})
    assert path == tmp_path / "events" / "inject" / "f1#2.json"
    assert json.loads(path.read_text()) == {"v": 1, "id": "f1#2", "run_id": "run-7", "fault": "worker_error",
                                            "rank": 1, "at_step": 30, "params": {"kind": "cuda"}}
    assert sorted(p.name for p in path.parent.iterdir()) == ["f1#2.json"]   # no .tmp left behind
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_the_inject_dir_gets_the_events_dirs_mode_so_workers_can_mark_fired(tmp_path):
    c = box(tmp_path)
    c.events_dir.chmod(0o777)   # as a backend whose workers run as another user would leave it
    c.send_job_command("f1", {"fault": "gil_hang", "rank": 0, "at_step": None, "params": {"hold_s": None}})
    assert stat.S_IMODE((c.events_dir / "inject").stat().st_mode) == 0o777
    c.events_dir.chmod(0o755)
    c.send_job_command("f2", {"fault": "gil_hang", "rank": 0, "at_step": None, "params": {"hold_s": None}})
    assert stat.S_IMODE((c.events_dir / "inject").stat().st_mode) == 0o755


def test_every_backend_supports_it_and_one_whose_nodes_write_elsewhere_refuses(tmp_path):
    from chaosbench.cluster.docker.backend import DockerCluster
    from chaosbench.cluster.local.backend import LocalCluster
    from chaosbench.cluster.slurm.backend import supported
    assert all("send_job_command" in s for s in (DockerCluster.supported_faults, LocalCluster.supported_faults,
                                                 supported(), Box.supported_faults))
    c = box(tmp_path)
    c.node_events_dir = "/scratch/events"   # Slurm without a shared filesystem: events are pumped back
    with pytest.raises(UnsupportedFault, match="its nodes write events to /scratch/events"):
        c.send_job_command("f1", {})


# -- the faults ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,params,action", [
    ("worker_error", {"kind": "nccl", "rank": 3, "step": 12}, {"kind": "nccl"}),
    ("gil_hang", {"rank": 0, "hold_s": 2.5}, {"hold_s": 2.5}),
    ("gil_hang", {"rank": 0}, {"hold_s": None}),
])
def test_a_fault_delivers_its_command_and_targets_its_rank(tmp_path, kind, params, action):
    c = box(tmp_path, nodes=2, ppn=2)
    f = fault(kind, params, c, tmp_path)
    f.inject()
    cmd = json.loads((c.events_dir / "inject" / "f1.json").read_text())
    assert cmd == {"v": 1, "id": "f1", "run_id": "run-7", "fault": kind, "rank": params["rank"],
                   "at_step": params.get("step"), "params": action}
    rec = json.loads((tmp_path / "faults.jsonl").read_text())
    assert (rec["action"], rec["target"], rec["fault"]) == ("inject", f"rank {params['rank']}", kind)
    assert f.heal() is None   # one-shot: nothing to undo


def test_random_rank_spans_the_whole_world_and_replays_with_the_seed(tmp_path):
    c = box(tmp_path, nodes=2, ppn=3)   # world 6: a node count alone would give only ranks 0-1
    ranks = set()
    for i in range(60):
        f = fault("worker_error", {"kind": "cuda"}, c, tmp_path, fid=f"f{i}", seed=f"0:f{i}:target")
        f.inject()
        ranks.add(json.loads((c.events_dir / "inject" / f"f{i}.json").read_text())["rank"])
    assert ranks == set(range(6))
    again = fault("worker_error", {"kind": "cuda"}, c, tmp_path, fid="f7", seed="0:f7:target")
    again.inject()
    assert again.target == f"rank {json.loads((c.events_dir / 'inject' / 'f7.json').read_text())['rank']}"


def test_corrupt_replicas_seed_comes_from_the_run_seed(tmp_path):
    def seed_of(run_seed, try_):
        c = box(tmp_path / f"{run_seed}-{try_}")
        fault("corrupt_replica", {"rank": 1, "bits": 3}, c, tmp_path, seed=f"{run_seed}:f1:target").inject()
        return json.loads((c.events_dir / "inject" / "f1.json").read_text())["params"]
    a, b, other = seed_of(1, 1), seed_of(1, 2), seed_of(2, 1)
    assert a == b and a["target"] == "param" and a["bits"] == 3 and isinstance(a["seed"], int)
    assert other["seed"] != a["seed"]


def test_they_are_cooperative_and_one_shot():
    for kind in ("worker_error", "gil_hang", "corrupt_replica"):
        cls = get_fault(kind)
        assert is_cooperative(kind) and cls.healable is False and cls.needs == ("send_job_command",)
    assert not is_cooperative("kill_node") and not is_cooperative("no_such_fault")


@pytest.mark.parametrize("kind,params,match", [
    ("worker_error", {"kind": "gpu"}, "kind"),
    ("worker_error", {}, "kind"),
    ("corrupt_replica", {"bits": 0}, "bits"),
    ("corrupt_replica", {"bits": 17}, "bits"),
    ("corrupt_replica", {"target": "buffer"}, "target"),
    ("gil_hang", {"step": -1}, "step"),
    ("gil_hang", {"hold_s": 0}, "hold_s"),
    ("gil_hang", {"rank": -1}, "rank"),
    ("gil_hang", {"rank": "any"}, "rank"),
    ("gil_hang", {"rank": True}, "rank"),
])
def test_bad_parameters_are_refused(kind, params, match):
    from pydantic import ValidationError
    with pytest.raises(ValidationError, match=match):
        get_fault(kind).Params.model_validate(params)


# -- at load ------------------------------------------------------------------------------------------
REFERENCE = "trainer:\n  config: trainer/configs/tiny.yaml\n"
USER_JOB = "trainer:\n  workdir: {workdir}\n  script: train.py\n"


def scenario(tmp_path: Path, fault_yaml: str, trainer: str = REFERENCE, cluster="{nodes: 2, procs_per_node: 2}"):
    (tmp_path / "train.py").write_text("print('hi')\n")
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\ncluster: {cluster}\n{trainer.format(workdir=tmp_path)}faults:\n  - at: {{seconds: 1}}\n"
                    f"    {fault_yaml}\nexpect: {{reaches_step: 10}}\n")
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def problems(path: Path) -> list[str]:
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    return exc.value.problems


@pytest.mark.parametrize("fault_yaml,where", [
    ("worker_error: {kind: gpu}", "faults[0].worker_error.kind: Input should be 'cuda', 'nccl' or 'exception'"),
    ("corrupt_replica: {bits: 0}", "faults[0].corrupt_replica.bits: Input should be greater than or equal to 1"),
    ("gil_hang: {step: -5}", "faults[0].gil_hang.step: Input should be greater than or equal to 0"),
    ("gil_hang: {rank: 4}", "faults[0].gil_hang.rank: rank 4 does not exist: the world has at most 4 rank(s) "
                            "(elastic.max_nodes x procs_per_node = 2 x 2), valid: 0-3 or random"),
])
def test_load_names_the_file_line_and_field(tmp_path, fault_yaml, where):
    path = scenario(tmp_path, fault_yaml)
    assert problems(path) == [f"{path}:{line_of(path, fault_yaml)}: {where}"]


def test_a_rank_of_a_node_the_cluster_may_grow_to_is_valid(tmp_path):
    s = load_scenario(scenario(tmp_path, "gil_hang: {rank: 5}",
                               cluster="{nodes: 2, procs_per_node: 2, elastic: {max_nodes: 3}}"))
    assert s.faults[0].params == {"rank": 5, "step": None, "hold_s": None}


def test_a_job_that_declares_no_instrument_calls_is_refused_with_why(tmp_path):
    path = scenario(tmp_path, "worker_error: {kind: cuda}", USER_JOB + "  instrumented: false\n")
    (p,) = problems(path)
    assert p.startswith(f"{path}:{line_of(path, 'worker_error')}: faults[0].worker_error: worker_error is a cooperative fault: the job itself "
                        "carries it out in cb.step / cb.fault_point")
    assert "trainer.instrumented: false says this job makes no such call, so it would never fire" in p


def test_a_job_that_says_nothing_or_yes_is_taken_at_its_word(tmp_path):
    assert load_scenario(scenario(tmp_path, "worker_error: {kind: cuda}", USER_JOB)).trainer.instrumented is None
    assert load_scenario(scenario(tmp_path, "worker_error: {kind: cuda}",
                                  USER_JOB + "  instrumented: true\n")).trainer.instrumented is True
    # non-cooperative faults do not care
    assert load_scenario(scenario(tmp_path, "kill_worker: {node: node-0}", USER_JOB + "  instrumented: false\n"))


def test_instrumented_is_for_a_users_own_job(tmp_path):
    path = scenario(tmp_path, "kill_worker: {node: node-0}",
                    "trainer:\n  config: trainer/configs/tiny.yaml\n  instrumented: false\n")
    assert any("trainer.instrumented applies to your own job" in p for p in problems(path))


def test_a_one_shot_cooperative_fault_takes_no_duration(tmp_path):
    path = scenario(tmp_path, "gil_hang: {rank: 0}\n    duration_s: 5")
    assert any("gil_hang is a one-shot fault with nothing to heal; remove duration_s" in p for p in problems(path))


def test_chaosbench_list_shows_them_on_every_backend(monkeypatch):
    from typer.testing import CliRunner

    from chaosbench.cli import app
    monkeypatch.delenv("CHAOSBENCH_SLURM_FORBID", raising=False)
    res = CliRunner().invoke(app, ["list", "--scenarios", "/nonexistent"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for kind in ("worker_error", "gil_hang", "corrupt_replica"):
        row = [line for line in res.output.splitlines() if kind in line][-1]
        # docker, local, slurm; not ray: its loop does not read cooperative commands (docs/ray.md)
        assert [cell.strip() for cell in row.split("│")[1:-1]] == [kind, "yes", "yes", "yes", "-"]

