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
