"""A Slurm run's directories on a compute host (chaosbench/cluster/slurm/node_dirs.py): created private
before a step uses them, refused when someone else made them first, removed by teardown and by the sweep
of a dead harness's job. The script runs here for real (as the node runs it: `python -c <source>`); the
backend's commands are checked against a recording stand-in for Slurm."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.slurm import allocation
from chaosbench.cluster.slurm import backend as slurm_backend
from chaosbench.cluster.slurm.commands import NODE_DIRS
from chaosbench.cluster.slurm.node_dirs import make

OTHER_UID = 65534


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(NODE_DIRS.argv(sys.executable, *args), capture_output=True, text=True, timeout=60, cwd="/")


def _as_root():
    if os.geteuid() != 0:
        pytest.skip("needs root to create a directory of another uid (the stat stand-in test covers the rule)")


def test_make_creates_the_top_directory_private_and_then_runs_the_command(tmp_path):
    ran = tmp_path / "ran"
    p = _run("make", str(tmp_path), "chaosbench-cbx/node-0/nvme", str(tmp_path), "chaosbench-cbx/events",
             "--", "touch", str(ran))
    assert p.returncode == 0, p.stderr
    assert ran.exists()
    top = tmp_path / "chaosbench-cbx"
    assert stat.S_IMODE(top.stat().st_mode) == 0o700
    assert (top / "node-0" / "nvme").is_dir() and (top / "events").is_dir()
    again = _run("make", str(tmp_path), "chaosbench-cbx/node-0/nvme", "--", "true")   # a restart finds its own
    assert again.returncode == 0, again.stderr


def test_make_refuses_a_directory_another_user_created_first(tmp_path):
    _as_root()
    planted = tmp_path / "chaosbench-cbx"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    os.chown(planted, OTHER_UID, OTHER_UID)
    ran = tmp_path / "ran"
    p = _run("make", str(tmp_path), "chaosbench-cbx/node-0", "--", "touch", str(ran))
    assert p.returncode == 2
    assert f"refusing to use {planted}" in p.stderr and f"owned by uid {OTHER_UID}" in p.stderr, p.stderr
    assert not ran.exists() and not (planted / "node-0").exists()


@pytest.mark.parametrize("kind", ["open", "link", "file"])
def test_make_refuses_an_open_directory_a_link_or_a_file_of_that_name(tmp_path, kind):
    top = tmp_path / "chaosbench-cbx"
    if kind == "open":   # ours, but anyone may have put things in it
        top.mkdir()
        top.chmod(0o777)
    elif kind == "link":   # to a directory of ours: the run would write where the link's owner chose
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        top.symlink_to(tmp_path / "elsewhere")
    else:
        top.write_text("")
    p = _run("make", str(tmp_path), "chaosbench-cbx/node-0", "--", "true")
    assert p.returncode == 2
    why = {"open": "open to other users (mode 0777", "link": "is a symbolic link", "file": "is not a directory"}[kind]
    assert why in p.stderr, p.stderr
    assert not (tmp_path / "elsewhere" / "node-0").exists()


def test_the_ownership_rule_with_a_stat_stand_in(tmp_path):
    """Without root a directory of another uid cannot be made here: the same rule, judged on what a
    stat of another user's directory says."""
    base = tmp_path / "shm"
    (base / "chaosbench-cbx").mkdir(parents=True, mode=0o700)

    def lstat(path):
        st = os.lstat(path)
        if path.endswith("chaosbench-cbx"):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, os.geteuid() + 4242,
                                   *tuple(st)[5:]))
        return st
    with pytest.raises(PermissionError, match=r"owned by uid \d+, not by this job's uid"):
        make(str(base), "chaosbench-cbx/node-0", lstat=lstat)
    assert make(str(base), "chaosbench-cbx/node-0") == str(base / "chaosbench-cbx" / "node-0")
    with pytest.raises(ValueError, match="without '..'"):
        make(str(base), "chaosbench-cbx/../../etc")


def test_remove_takes_ours_and_keeps_another_users_and_a_links_target(tmp_path):
    ours = tmp_path / "a" / "chaosbench-cbx"
    (ours / "node-0").mkdir(parents=True)
    (ours / "node-0" / "ckpt").write_text("x")
    (tmp_path / "b").mkdir()
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "keep").write_text("x")
    (tmp_path / "b" / "chaosbench-cbx").symlink_to(tmp_path / "target")
    p = _run("remove", str(tmp_path / "a"), "chaosbench-cbx", str(tmp_path / "b"), "chaosbench-cbx",
             str(tmp_path / "c"), "chaosbench-cbx")
    assert p.returncode == 0, p.stdout + p.stderr
    assert not ours.exists()
    assert (tmp_path / "target" / "keep").exists()
    lines = p.stdout.splitlines()
    assert any(f"removed {ours}" in line for line in lines)
    assert any("kept" in line and "symbolic link" in line for line in lines)
    assert any("absent" in line for line in lines)
    if os.geteuid() == 0:
        theirs = tmp_path / "d" / "chaosbench-cbx"
        theirs.mkdir(parents=True)
        os.chown(theirs, OTHER_UID, OTHER_UID)
        p = _run("remove", str(tmp_path / "d"), "chaosbench-cbx")
        assert theirs.exists() and f"owned by uid {OTHER_UID}" in p.stdout


# -- the backend's commands ----------------------------------------------------------------------------
class _Slurm:
    """Answers like slurmctld for job 7 on c1,c2 whose node steps 7.0 and 7.1 run until cancelled."""

    def __init__(self, remove_fails=False):
        self.calls, self.popens, self.cancelled, self.remove_fails = [], [], False, remove_fails

    def run(self, *cmd, timeout=60, check=True, text=True):
        self.calls.append(list(cmd))
        if cmd[:2] == ("squeue", "-h") and "-s" in cmd:
            return "7.batch\n" if self.cancelled else "7.0\n7.1\n7.batch\n7.extern\n"
        if cmd[0] == "scancel" and "7.0" in cmd:
            self.cancelled = True
        if cmd[0] == "srun" and "remove" in cmd:
            if self.remove_fails:
                raise ClusterError("srun: error: Unable to create step")
            return "c1: removed /dev/shm/chaosbench-p\nc1: removed /scratch/chaosbench-p\nc2: absent /dev/shm/chaosbench-p\n"
        if cmd[:3] == ("scontrol", "show", "hostnames"):
            return "c1\nc2\n"
        return ""

    def popen(self, cmd, log):
        self.popens.append(cmd)

        class P:
            pid = 0

            def poll(self):
                return 0
        return P()

    def argv(self, cmd, stdin=False):
        return cmd


def _cluster(monkeypatch, tmp_path, slurm):
    monkeypatch.setenv("CHAOSBENCH_SLURM_SHARED", str(tmp_path / "nfs"))
    monkeypatch.setenv("CHAOSBENCH_SLURM_SCRATCH", "/scratch")
    c = slurm_backend.SlurmCluster(ClusterSpec(run_id="r", run_dir=tmp_path / "run", nodes=2))
    c.slurm, c.job_id, c.hosts = slurm, "7", ["c1", "c2"]
    return c


def _launched(monkeypatch, tmp_path, shared: bool):
    """A node's srun argv, as the backend hands it to Slurm."""
    c = _cluster(monkeypatch, tmp_path, _Slurm())
    if not shared:
        monkeypatch.delenv("CHAOSBENCH_SLURM_SHARED")
        c = slurm_backend.SlurmCluster(ClusterSpec(run_id="r", run_dir=tmp_path / "run", nodes=2))
        c.slurm = _Slurm()
    c.services = type("S", (), {"host": "10.0.0.1", "ports": {"proxy_etcd": 1, "proxy_s3": 2}})()
    c._host_of = {"node-0": "c1"}
    (tmp_path / "run" / "logs").mkdir(parents=True, exist_ok=True)
    c._launch("node-0", wait=False)
    (argv,) = c.slurm.popens
    i = argv.index("make")
    assert argv[i - 2:i] == ["-c", NODE_DIRS.source]
    dash = argv.index("--", i)
    return c, argv[i + 1:dash], argv[dash + 1:]


def test_a_node_step_runs_behind_the_private_directory_check(monkeypatch, tmp_path):
    c, dirs, command = _launched(monkeypatch, tmp_path, shared=True)
    top = f"chaosbench-{c.project}"
    assert dirs == ["/scratch", f"{top}/node-0/nvme", "/dev/shm", f"{top}/node-0"]
    assert command[:2] == ["python3", "-m"]   # then the node's own command, exec'd
    c, dirs, _ = _launched(monkeypatch, tmp_path, shared=False)   # events on the node's scratch: checked too
    assert dirs[4:] == ["/scratch", f"chaosbench-{c.project}/events"]


def test_the_shared_events_directory_is_made_private_by_the_harness(monkeypatch, tmp_path):
    c = _cluster(monkeypatch, tmp_path, _Slurm())
    c._make_shared()
    assert stat.S_IMODE((tmp_path / "nfs" / c.project).stat().st_mode) == 0o700
    assert c.events_dir.is_dir()
    if os.geteuid() == 0:
        os.chown(tmp_path / "nfs" / c.project, OTHER_UID, OTHER_UID)
        with pytest.raises(ClusterError, match=f"owned by uid {OTHER_UID}"):
            c._make_shared()


def test_teardown_ends_the_steps_then_removes_the_directories_on_every_host_then_cancels(monkeypatch, tmp_path):
    c = _cluster(monkeypatch, tmp_path, _Slurm())
    assert c._stop() == []
    calls = c.slurm.calls
    ends = calls.index(["scancel", "7.0", "7.1"])
    (remove,) = [k for k, cmd in enumerate(calls) if cmd[0] == "srun"]
    srun = calls[remove]
    for opt in ("--jobid=7", "--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=c1,c2"):
        assert opt in srun
    top = f"chaosbench-{c.project}"
    assert srun[srun.index("remove") + 1:] == ["/dev/shm", top, "/scratch", top]
    assert ends < remove < calls.index(["scancel", "7"])


def test_teardown_says_when_the_directories_could_not_be_removed(monkeypatch, tmp_path):
    c = _cluster(monkeypatch, tmp_path, _Slurm(remove_fails=True))
    (left,) = c._stop()
    assert f"/dev/shm/chaosbench-{c.project}" in left and "c1, c2" in left and "Unable to create step" in left


def test_the_sweep_removes_a_dead_harness_jobs_directories_before_cancelling_it(monkeypatch):
    monkeypatch.setenv("CHAOSBENCH_SLURM_SCRATCH", "/scratch")

    class Dead(_Slurm):
        def run(self, *cmd, **kw):
            if cmd[:3] == ("squeue", "-h", "-o"):
                self.calls.append(list(cmd))
                return f"7|chaosbench-cbrun1|RUNNING|c[1-2]|{os.uname().nodename}:999999999:1\n"
            return super().run(*cmd, **kw)
    rec = Dead()
    removed = {}
    assert allocation.sweep(rec, removed=removed) == ["7"]
    (srun,) = [cmd for cmd in rec.calls if cmd[0] == "srun" and "remove" in cmd]
    assert srun[srun.index("remove") + 1:] == ["/dev/shm", "chaosbench-cbrun1", "/scratch", "chaosbench-cbrun1"]
    assert "--nodelist=c[1-2]" in srun and "--nodes=2" in srun
    assert rec.calls.index(srun) < rec.calls.index(["scancel", "7"])
    assert removed["slurm node dirs"] == ["c1: removed /dev/shm/chaosbench-p (job 7)",
                                          "c1: removed /scratch/chaosbench-p (job 7)"]


def test_the_script_ships_whole_and_runs_without_chaosbench_on_the_path():
    src = Path(slurm_backend.__file__).with_name("node_dirs.py").read_text()
    assert NODE_DIRS.source == src and "import chaosbench" not in src and "from chaosbench" not in src
