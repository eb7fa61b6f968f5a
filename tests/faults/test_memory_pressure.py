"""memory_pressure: its parameters, the calls it makes, the heal record that carries the kernel's OOM count,
the docker squeeze (limits and ballast, with docker itself faked) and the refusal elsewhere."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from chaosbench.cluster.docker import memory as docker_memory
from chaosbench.cluster.errors import UnsupportedFault
from chaosbench.cluster.docker.backend import DockerCluster
from chaosbench.cluster.local.backend import LocalCluster
from chaosbench.faults import validate_params
from chaosbench.faults.capabilities import missing_primitives
from chaosbench.scenario import ScenarioError, load_scenario
from tests.faults.recording import RecordingCluster, make_fault

ROOT = Path(__file__).resolve().parents[2]


class Squeezable(RecordingCluster):
    """Answers the two memory primitives as a backend would."""

    def __init__(self, root, kills):
        super().__init__(root)
        self.kills = kills

    def _answer(self, name, args):
        if name == "squeeze_memory":
            return {"limit_mb": 300, "held_mb": 900, "oom_kill": 4}
        if name == "release_memory":
            return {"oom_kills": self.kills, "docker_oom_events": self.kills}
        return super()._answer(name, args)


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_inject_squeezes_the_node_and_heal_records_the_oom_kills(tmp_path):
    c = Squeezable(tmp_path, kills=1)
    f = make_fault("memory_pressure", {"node": "node-1", "mb": 300}, c, tmp_path / "faults.jsonl")
    f.inject()
    f.heal()
    assert c.calls == [("squeeze_memory", ("node-1", 300, None)), ("release_memory", ("node-1",))]
    inject, heal = lines(tmp_path / "faults.jsonl")
    assert (inject["action"], inject["params"]) == ("inject", {"node": "node-1", "mb": 300, "fraction": None})
    assert heal["action"] == "heal" and heal["target"] == "node-1"
    assert heal["params"]["oom_kills"] == 1 and heal["params"]["limit_mb"] == 300 and heal["params"]["mb"] == 300


def test_a_squeeze_that_killed_nothing_says_zero_not_nothing(tmp_path):
    c = Squeezable(tmp_path, kills=0)
    f = make_fault("memory_pressure", {"node": "node-0", "fraction": 0.5}, c, tmp_path / "faults.jsonl")
    f.inject()
    f.heal()
    assert c.calls[0] == ("squeeze_memory", ("node-0", None, 0.5))
    assert lines(tmp_path / "faults.jsonl")[-1]["params"]["oom_kills"] == 0


def test_heal_without_inject_does_nothing(tmp_path):
    c = Squeezable(tmp_path, kills=1)
    f = make_fault("memory_pressure", {"mb": 300}, c, tmp_path / "faults.jsonl")
    assert f.heal() is None and c.calls == []


@pytest.mark.parametrize("params,field", [
    ({"mb": 7}, "mb"),
    ({"fraction": 0}, "fraction"),
    ({"fraction": 1}, "fraction"),
    ({"fraction": 1.5}, "fraction"),
    ({"mb": 300, "node": "node-1 && reboot"}, "node"),
])
def test_bad_sizes_are_refused_by_field(params, field):
    with pytest.raises(ValidationError) as ei:
        validate_params("memory_pressure", params)
    assert [e["loc"] for e in ei.value.errors()] == [(field,)]


@pytest.mark.parametrize("params", [{}, {"mb": 300, "fraction": 0.5}])
def test_exactly_one_of_mb_and_fraction(params):
    with pytest.raises(ValidationError, match="exactly one of mb .* or fraction"):
        validate_params("memory_pressure", params)


def test_a_scenario_without_a_size_names_file_line_and_both_fields(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ncluster: {nodes: 2}\nfaults:\n  - at: {step: 5}\n    memory_pressure: {node: node-1}\n"
                    "    duration_s: 10\nexpect: {reaches_step: 20}\n")
    with pytest.raises(ScenarioError) as ei:
        load_scenario(path)
    (p,) = ei.value.problems
    assert f"{path}:5: faults[0].memory_pressure" in p and "mb" in p and "fraction" in p


def test_the_library_story_loads():
    s = load_scenario(ROOT / "scenarios" / "oom_worker.yaml")
    (f,) = s.faults
    assert f.kind == "memory_pressure" and f.duration_s


# -- backends --------------------------------------------------------------------------------------

def test_only_docker_has_the_memory_primitives():
    both = {"squeeze_memory", "release_memory"}
    assert both <= DockerCluster.supported_faults
    assert not both & LocalCluster.supported_faults


def test_a_local_scenario_is_refused_naming_the_primitives():
    fault = type("F", (), {"id": "f1", "kind": "memory_pressure", "params": {"mb": 300}})
    assert missing_primitives([fault], LocalCluster.supported_faults) == [
        "f1 (memory_pressure) needs release_memory, squeeze_memory"]


def test_a_backend_without_it_says_why_and_which_has_it(tmp_path):
    from chaosbench.cluster.base import Cluster

    class Bare(Cluster):
        backend = "bare"
        start_training = node_status = collect = lambda *a: None

    with pytest.raises(UnsupportedFault, match="'bare' does not support squeeze_memory: .*no memory cgroup.*"
                                               "whole host.*docker backend has it"):
        Bare.__new__(Bare).squeeze_memory("node-0", 300)


class FakeDocker:
    """docker_memory's `docker` calls, answered like docker 20.10 on cgroup v1."""

    def __init__(self, memory=4831838208, swap=9663676416, usage_mb=1500, held_mb=1000, kills=(0, 1)):
        self.calls, self.host = [], {"Memory": memory, "MemorySwap": swap}
        self.reads = [json.dumps({"usage_mb": usage_mb, "held_mb": held_mb, "oom_kill": k}) for k in kills]

    def __call__(self, *args, check=True, timeout=60, **kw):
        self.calls.append(args)
        if args[:2] == ("inspect", "-f"):
            return json.dumps(self.host)
        if args[0] == "exec" and docker_memory.READ in args:
            return self.reads.pop(0)
        if args[0] == "info":
            return "25276502016\n"
        if args[0] == "events":
            return "1795494153\n"
        return ""


class FakeCluster:
    def __init__(self, incarnations=("a", "a"), status="running"):
        self._squeezed, self._inc, self.status = {}, list(incarnations), status
        self.spec = SimpleNamespace(procs_per_node=2)

    def _signal_worker(self, node, local_rank, sig):   # rank 0 runs (a warm-start fork and its client)
        from chaosbench.cluster.errors import ClusterError
        if local_rank:
            raise ClusterError(f"{node}: no worker with LOCAL_RANK={local_rank} is running")
        return ["101", "102"]

    def _node(self, node):
        return f"proj-{node}"

    def _incarnation(self, node):
        return self._inc.pop(0)

    def node_status(self, node):
        return self.status


def updates(fake):
    return [a[1:-1] for a in fake.calls if a[0] == "update"]


def test_docker_squeeze_below_use_sets_the_limit_above_it_and_a_ballast_for_the_rest(monkeypatch):
    fake = FakeDocker(usage_mb=1500, held_mb=1000)
    monkeypatch.setattr(docker_memory, "docker", fake)
    c = FakeCluster()
    got = docker_memory.squeeze(c, "node-1", None, 0.8)
    assert got["limit_mb"] == 800 and got["cgroup_mb"] == 1500 + docker_memory.HEADROOM_MB
    assert got["ballast_mb"] == got["cgroup_mb"] - 800
    assert updates(fake) == [("--memory", f"{got['cgroup_mb']}m", "--memory-swap", f"{got['cgroup_mb']}m")]
    (ballast,) = [a for a in fake.calls if a[:2] == ("exec", "-d")]
    # the workers found now go to the ballast, which puts them first in the OOM killer's line, then itself
    assert ballast[-4:] == (docker_memory.BALLAST_MARK, str(got["ballast_mb"]), "101", "102")
    seen = docker_memory.release(c, "node-1")
    assert seen == {"oom_kills": 1, "docker_oom_events": 1}
    # the ballast is killed and the container's own limits come back, memory and swap alike
    assert any(docker_memory.RELEASE in a for a in fake.calls)
    assert updates(fake)[-1] == ("--memory", "4831838208", "--memory-swap", "9663676416")


def test_docker_squeeze_above_use_is_the_limit_alone(monkeypatch):
    fake = FakeDocker(usage_mb=500, held_mb=400)
    monkeypatch.setattr(docker_memory, "docker", fake)
    got = docker_memory.squeeze(FakeCluster(), "node-1", 2000, None)
    assert (got["cgroup_mb"], got["ballast_mb"]) == (2000, 0)
    assert not [a for a in fake.calls if a[:2] == ("exec", "-d")]


def test_an_unlimited_container_gets_the_hosts_memory_back_and_unlimited_swap(monkeypatch):
    fake = FakeDocker(memory=0, swap=-1)
    monkeypatch.setattr(docker_memory, "docker", fake)
    c = FakeCluster()
    docker_memory.squeeze(c, "node-1", 300, None)
    docker_memory.release(c, "node-1")
    # docker 20.10 refuses --memory -1 and ignores 0; swap -1 only once memory is raised (runc's write order)
    assert updates(fake)[-2:] == [("--memory", "25276502016", "--memory-swap", "25276502016"),
                                  ("--memory-swap", "-1")]


def test_a_restarted_node_has_a_new_cgroup_so_its_count_is_unknown(monkeypatch):
    fake = FakeDocker(kills=(3, 0))
    monkeypatch.setattr(docker_memory, "docker", fake)
    c = FakeCluster(incarnations=("first", "second"))
    docker_memory.squeeze(c, "node-1", 300, None)
    assert docker_memory.release(c, "node-1")["oom_kills"] is None


def test_the_kills_read_while_the_squeeze_holds_end_the_fault(monkeypatch):
    """memory_kills: the cgroup's count since the squeeze (the runner heals at the first); nothing is
    known without a squeeze or once the node restarted (a new cgroup counts from zero)."""
    fake = FakeDocker(kills=(2, 2, 3))
    monkeypatch.setattr(docker_memory, "docker", fake)
    c = FakeCluster(incarnations=("a", "a", "a", "b"))
    assert docker_memory.kills(c, "node-1") is None
    docker_memory.squeeze(c, "node-1", 300, None)
    assert docker_memory.kills(c, "node-1") == 0
    assert docker_memory.kills(c, "node-1") == 1
    assert docker_memory.kills(c, "node-1") is None and not fake.reads   # restarted: not read


def test_the_fault_ends_at_the_first_kill_and_not_before(tmp_path):
    c = Squeezable(tmp_path, kills=1)
    f = make_fault("memory_pressure", {"node": "node-1", "mb": 300}, c, tmp_path / "faults.jsonl")
    seen = iter([None, 0, 1])
    c.memory_kills = lambda node: next(seen)
    assert f.ended() is None   # not injected: not asked
    f.inject()
    assert f.ended() is None and f.ended() is None
    assert f.ended() == "the kernel OOM-killed 1 process(es) on node-1"


def test_a_fraction_below_dockers_minimum_is_refused(monkeypatch):
    monkeypatch.setattr(docker_memory, "docker", FakeDocker(held_mb=9))
    from chaosbench.cluster.errors import ClusterError
    with pytest.raises(ClusterError, match="below docker's minimum"):
        docker_memory.squeeze(FakeCluster(), "node-1", None, 0.5)


def test_release_without_a_squeeze_knows_nothing(monkeypatch):
    fake = FakeDocker()
    monkeypatch.setattr(docker_memory, "docker", fake)
    assert docker_memory.release(FakeCluster(), "node-1") == {"oom_kills": None} and fake.calls == []


@pytest.mark.skipif(not os.path.exists("/sys/fs/cgroup/memory/memory.stat")
                    and not os.path.exists("/sys/fs/cgroup/memory.stat"), reason="no memory cgroup here")
def test_the_in_node_reader_runs_on_this_kernel():
    out = subprocess.run([sys.executable, "-c", docker_memory.READ], capture_output=True, text=True, check=True)
    got = docker_memory.parse_read(out.stdout)
    assert got["usage_mb"] >= 0 and got["held_mb"] >= 0 and set(got) == {"usage_mb", "held_mb", "oom_kill"}


def _fd_targets(pid: int) -> list[str]:
    """What a starting process's fds point at; one it closes between listing and reading is skipped."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            pass
    return out


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="no memfd_create")
def test_the_ballast_holds_its_pages_in_a_memfd_until_killed():
    worker = subprocess.Popen(["sleep", "60"])
    p = subprocess.Popen([sys.executable, "-c", docker_memory.BALLAST, docker_memory.BALLAST_MARK, "8",
                          str(worker.pid)])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            memfd = [f for f in _fd_targets(p.pid) if docker_memory.BALLAST_MARK in f]
            if memfd and p.poll() is None:
                break
            time.sleep(0.1)
        assert memfd and p.poll() is None, "the ballast should hold its memfd and wait"
        # RELEASE finds a ballast by the word in its argv, never by its own command line
        assert docker_memory.BALLAST_MARK.encode() in Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")[1:]
        # a second OOM kill, should the kernel need one, takes the ballast, never the agent
        for pid in (worker.pid, p.pid):
            assert Path(f"/proc/{pid}/oom_score_adj").read_text().strip() == "1000", pid
    finally:
        for proc in (p, worker):
            proc.kill()
            proc.wait()
