"""Teardown bookkeeping without a cluster: a timed-out docker call does not stop best-effort removal,
an incomplete teardown stays registered for the exit-time retry, and a second Ctrl-C is deferred."""
import os
import signal
import subprocess

import pytest

from chaosbench.cluster import docker_cli, lifecycle


def test_docker_timeout_with_check_false_returns_empty(monkeypatch):
    def slow(*a, **kw):
        assert kw.get("start_new_session") is True   # a terminal's Ctrl-C must not reach the docker CLI
        raise subprocess.TimeoutExpired(a[0], kw["timeout"])
    monkeypatch.setattr(subprocess, "run", slow)
    assert docker_cli.docker("rm", "-f", "x", check=False) == ""
    with pytest.raises(docker_cli.ClusterError, match="timed out"):
        docker_cli.docker("rm", "-f", "x")


class Flaky:
    def __init__(self, fail_times):
        self.fail_times, self.calls, self.torn_down = fail_times, 0, False

    def down(self):
        self.calls += 1
        if self.calls <= self.fail_times:
            raise docker_cli.ClusterError("container still there")
        self.torn_down = True
        lifecycle.untrack(self)


def test_incomplete_teardown_stays_tracked_and_is_retried_at_exit():
    c = Flaky(fail_times=1)
    lifecycle.track(c)
    assert lifecycle.teardown(c) is False and c in lifecycle._live
    lifecycle._down_all()   # what atexit runs
    assert c.calls == 2 and c.torn_down and c not in lifecycle._live


def test_second_ctrl_c_during_teardown_is_deferred_until_it_is_done():
    class Slow(Flaky):
        def down(self):
            os.kill(os.getpid(), signal.SIGINT)   # Ctrl-C arrives in the middle of removal
            super().down()
    c = Slow(fail_times=0)
    with pytest.raises(KeyboardInterrupt):
        lifecycle.teardown(c)
    assert c.torn_down   # removal finished before the interrupt was re-raised
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_clean_keeps_and_lists_another_hosts_things_and_all_removes_them(tmp_path, monkeypatch):
    """An owner on another host cannot be checked from here: a plain clean keeps its things and says
    so; --all removes them. A dead local owner's things go either way."""
    import socket

    from chaosbench.cluster import clean as clean_mod
    monkeypatch.setattr(clean_mod, "SHM_ROOT", tmp_path)
    monkeypatch.setattr(clean_mod.loopfs, "sweep", lambda everything: [])
    monkeypatch.setattr(clean_mod.loopfs, "stale_loops", lambda everything: [])
    monkeypatch.setattr(clean_mod, "_slurm", lambda everything, removed: None)
    # --all kills every process carrying an owner token: the other xdist worker's etcd and agents too
    monkeypatch.setattr(clean_mod.proctree, "find_with_key", lambda key: {})
    other, dead = tmp_path / "chaosbench-cbother", tmp_path / "chaosbench-cbdead"
    for d, tok in ((other, "elsewhere-host:4242:123"), (dead, f"{socket.gethostname()}:999999:1")):
        d.mkdir()
        (d / "owner").write_text(tok)
    removed, kept = clean_mod.clean(docker=False)
    assert other.is_dir() and not dead.exists()
    assert str(dead) in removed["shm dirs"] and str(other) not in removed["shm dirs"]
    assert [k for k in kept if "elsewhere-host" in k] == [f"shm dir {other} (owner elsewhere-host:4242:123 on another host)"]
    removed, _ = clean_mod.clean(everything=True, docker=False)
    assert not other.exists() and str(other) in removed["shm dirs"]


def test_runner_says_teardown_incomplete_rather_than_torn_down(tmp_path):
    from chaosbench.runner import RunOptions, Runner
    from chaosbench.scenario import parse_scenario
    from tests.scenario.fake_cluster import FakeCluster
    from tests.scenario.test_runner import BASE

    class Leaky(FakeCluster):
        def down(self):
            super().down()
            self.torn_down = False   # something was left: the cluster says so by not setting it

    said = []
    s = parse_scenario(BASE, "fake.yaml")
    Runner(s, None, RunOptions(backend="fake", report_dir=tmp_path, poll_s=0.02, on_message=said.append,
                               cluster_factory=lambda b, spec: Leaky(spec))).run()
    assert any("teardown incomplete" in m for m in said), said
    assert not any(m == "cluster torn down" for m in said), said
