"""Teardown bookkeeping without a cluster: a timed-out docker call does not stop best-effort removal,
an incomplete teardown stays registered for the exit-time retry, and a second Ctrl-C is deferred."""
import os
import signal
import subprocess

import pytest

from chaosbench.cluster import lifecycle

from chaosbench.cluster.docker import cli as docker_cli


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


def test_a_failed_teardown_is_retried_at_exit_after_the_run_dropped_its_cluster():
    # the run returned (its frames, and with them the cluster, are gone) before atexit runs
    calls = []

    class Gone(Flaky):
        def down(self):
            calls.append(1)
            super().down()

    c = Gone(fail_times=1)
    lifecycle.track(c)
    assert lifecycle.teardown(c) is False
    del c
    import gc
    gc.collect()
    lifecycle._down_all()
    assert len(calls) == 2 and not any(isinstance(x, Gone) for x in lifecycle._live)


def test_a_network_with_active_endpoints_is_removed_once_the_daemon_released_them(monkeypatch):
    # `network rm` right after `rm -f` of its containers: "has active endpoints" for a while
    nets, calls = ["n1"], []

    def fake(*args, check=True, **kw):
        calls.append(args[:2])
        if args[:2] == ("network", "ls"):
            return " ".join(nets)
        if args[:2] == ("network", "inspect"):
            return "ep1 "
        if args[:2] == ("network", "rm"):
            if sum(c == ("network", "rm") for c in calls) < 3:
                raise docker_cli.ClusterError("network n1 has active endpoints")
            nets.clear()
        return ""
    monkeypatch.setattr(docker_cli, "docker", fake)
    monkeypatch.setattr(docker_cli.time, "sleep", lambda s: None)
    assert docker_cli._remove_with_retries("network", "label=x") == ""
    assert not nets and calls.count(("network", "rm")) == 3 and ("network", "disconnect") in calls


def test_removal_gives_up_at_its_deadline_and_leaves_the_verdict_to_leftovers(monkeypatch):
    calls = []

    def fake(*args, check=True, **kw):
        calls.append(args[:2])
        if args[:2] == ("volume", "ls"):
            return "v1"
        if args[:2] == ("volume", "rm"):
            raise docker_cli.ClusterError("volume is in use")
        return ""
    monkeypatch.setattr(docker_cli, "docker", fake)
    monkeypatch.setattr(docker_cli.time, "sleep", lambda s: None)
    assert "in use" in docker_cli._remove_with_retries("volume", "label=x", within_s=0)
    assert calls.count(("volume", "rm")) == 1


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
