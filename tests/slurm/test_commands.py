"""Unit tests: the sbatch/srun argv the backend sends, output parsing, slurm.conf, refusal up front."""
from pathlib import Path

import pytest

from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.slurm import backend as slurm_backend
from chaosbench.cluster.slurm import allocation
from chaosbench.cluster.slurm.commands import (Allocation, parse_job_id, parse_steps, sbatch_argv,
                                               srun_argv, unusable)
from chaosbench.cluster.slurm.conf import compute_hosts, slurm_conf


def test_sbatch_argv_holds_an_allocation_with_site_options():
    a = Allocation(nodes=3, job_name="chaosbench-x", partition="gpu", account="ml", time="00:30:00",
                   gpus_per_node=8, comment="host:1:2", extra=["--qos=high"])
    argv = sbatch_argv(a)
    assert argv[:2] == ["sbatch", "--parsable"]
    for opt in ("--nodes=3", "--partition=gpu", "--account=ml", "--time=00:30:00", "--gpus-per-node=8",
                "--comment=host:1:2", "--qos=high", "--job-name=chaosbench-x"):
        assert opt in argv
    assert argv[-2:] == ["--wrap", "exec sleep infinity"]   # options before the wrapped command


def test_sbatch_argv_leaves_out_unset_options():
    argv = sbatch_argv(Allocation(nodes=1, job_name="j"))
    assert not any(a.startswith(("--partition", "--account", "--time", "--gpus")) for a in argv)


def test_srun_argv_one_overlapping_step_on_one_node_with_explicit_env():
    argv = srun_argv("42", "c2", "node-1", {"B": "2", "A": "1"}, ["python3", "-m", "x"], cwd="/src")
    assert argv[0] == "srun"
    for opt in ("--jobid=42", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=c2", "--job-name=node-1",
                "--chdir=/src"):
        assert opt in argv
    i = argv.index("env")
    assert argv[i + 1:] == ["A=1", "B=2", "python3", "-m", "x"]


def test_parse_job_and_steps():
    assert parse_job_id("17\n") == "17"
    assert parse_job_id("17;cluster\n") == "17"
    with pytest.raises(ClusterError, match="no job id"):
        parse_job_id("sbatch: error: bad partition")
    assert parse_steps("17.0 node-0\n17.1 node-1\n17.batch batch\n") == {
        "node-0": "17.0", "node-1": "17.1", "batch": "17.batch"}


def test_slurm_conf_names_every_compute_node_and_tracks_process_trees():
    conf = slurm_conf(compute_hosts(3))
    assert "NodeName=slurmc1,slurmc2,slurmc3 CPUs=2" in conf
    assert "ProctrackType=proctrack/linuxproc" in conf   # signals reach workers in their own sessions
    assert "AuthType=auth/munge" in conf and "PartitionName=debug Nodes=ALL Default=YES" in conf


def test_unusable_names_the_missing_login(monkeypatch):
    monkeypatch.delenv("CHAOSBENCH_SLURM_LOGIN", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "sbatch not found" in unusable()
    monkeypatch.setenv("CHAOSBENCH_SLURM_LOGIN", "nosuchtool-xyz host")
    assert "nosuchtool-xyz" in unusable()


def test_forbidden_fault_is_dropped_with_the_permission_it_needs(monkeypatch, tmp_path):
    monkeypatch.setenv("CHAOSBENCH_SLURM_SHARED", str(tmp_path))
    monkeypatch.setenv("CHAOSBENCH_SLURM_FORBID", "partition")
    c = slurm_backend.SlurmCluster(ClusterSpec(run_id="r", run_dir=tmp_path, nodes=2))
    assert "partition" not in c.supported_faults and "kill_node" in c.supported_faults
    assert "NET_ADMIN" in c.refusal_hint()


def test_without_a_shared_filesystem_nodes_write_locally_and_events_arrive_in_the_run_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("CHAOSBENCH_SLURM_SHARED", raising=False)
    monkeypatch.setenv("CHAOSBENCH_SLURM_SCRATCH", "/scratch")
    c = slurm_backend.SlurmCluster(ClusterSpec(run_id="r", run_dir=tmp_path, nodes=2))
    assert c.events_dir == tmp_path.resolve() / "events"
    assert c.node_events_dir == f"/scratch/chaosbench-{c.project}/events"
    monkeypatch.setenv("CHAOSBENCH_SLURM_SHARED", str(tmp_path / "nfs"))
    c = slurm_backend.SlurmCluster(ClusterSpec(run_id="r", run_dir=tmp_path, nodes=2))
    assert c.node_events_dir == str(c.events_dir) == str(tmp_path / "nfs" / c.project / "events")


def test_stream_sends_complete_lines_once_and_holds_back_a_torn_one(tmp_path):
    import io
    from chaosbench.observer.stream import stream
    (tmp_path / "events-node-0-local0.jsonl").write_bytes(b'{"a": 1}\n{"b": 2}\n{"tor')
    (tmp_path / "notes.txt").write_text("not an event file\n")
    out = io.BytesIO()
    stream(str(tmp_path), once=True, out=out)
    assert out.getvalue() == b'events-node-0-local0.jsonl\t{"a": 1}\nevents-node-0-local0.jsonl\t{"b": 2}\n'


class _FakeSlurm:
    """Runs the stream step's command locally, as srun would on the node."""
    def __init__(self, python):
        self.python = python

    def argv(self, cmd):
        i = cmd.index("-m")
        return [self.python, *cmd[i:]]

    def run(self, *cmd, timeout=60, check=True, text=True):
        import subprocess
        return subprocess.run(self.argv(list(cmd)), capture_output=True, timeout=timeout, check=True).stdout


def test_event_pump_streams_live_and_sync_rewrites_whole_files(tmp_path):
    import sys
    import time
    from chaosbench.cluster.slurm.event_pump import EventPump
    node, dest = tmp_path / "node", tmp_path / "run" / "events"
    node.mkdir()
    pump = EventPump(_FakeSlurm(sys.executable), "1", sys.executable, str(Path(__file__).resolve().parents[2]),
                     str(node), dest)
    pump.follow("h1")
    try:
        with open(node / "events-node-0-local0.jsonl", "ab") as f:
            f.write(b'{"event": "step", "step": 1}\n')
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (dest / "events-node-0-local0.jsonl").exists():
            time.sleep(0.05)
        assert (dest / "events-node-0-local0.jsonl").read_bytes() == b'{"event": "step", "step": 1}\n'
    finally:
        pump.stop()
    with open(node / "events-node-0-local0.jsonl", "ab") as f:   # written after the stream stopped
        f.write(b'{"event": "step", "step": 2}\n')
    assert pump.sync(["h1"]) == []
    assert (dest / "events-node-0-local0.jsonl").read_bytes().count(b"\n") == 2


def test_scenario_slurm_block_is_validated_with_the_field_named(tmp_path):
    from chaosbench.scenario import ScenarioError, load_scenario
    p = tmp_path / "s.yaml"
    p.write_text("name: s\ntrainer: {config: trainer/configs/tiny.yaml}\n"
                 "cluster: {nodes: 2, slurm: {time: soon, gpu_per_node: 2}}\nexpect: {reaches_step: 5}\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    text = "\n".join(e.value.problems)
    assert str(p) in text and "cluster.slurm.time" in text and "cluster.slurm.gpu_per_node" in text, text


def test_cli_refuses_bad_slurm_flags_with_exit_2(tmp_path):
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-m", "chaosbench.cli", "run", str(root / "scenarios" / "node_loss.yaml"),
                        "--backend", "slurm", "--slurm-time", "soon", "--sbatch-option", "qos=low"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "--slurm-time: 'soon'" in out and "--sbatch-option: 'qos=low'" in out, out


class _NoIptables:
    """Slurm whose steps cannot run iptables (a site without NET_ADMIN in jobs)."""
    def __init__(self):
        self.calls = []

    def run(self, *cmd, timeout=60, check=True):
        self.calls.append(cmd)
        raise ClusterError("srun: error: iptables: Permission denied (you must be root)")


def test_probe_refuses_network_faults_the_nodes_do_not_permit(monkeypatch, tmp_path):
    monkeypatch.setenv("CHAOSBENCH_SLURM_SHARED", str(tmp_path))
    monkeypatch.delenv("CHAOSBENCH_SLURM_FORBID", raising=False)
    c = slurm_backend.SlurmCluster(ClusterSpec(run_id="r", run_dir=tmp_path, nodes=2))
    c.slurm, c.job_id, c.hosts = _NoIptables(), "7", ["c1", "c2"]
    assert c.probe_faults({"kill_node", "start_node"}) == [] and c.slurm.calls == []   # nothing to probe
    refused = c.probe_faults({"partition", "heal_network", "kill_node"})
    assert len(refused) == 2 and all("NET_ADMIN" in r and "Permission denied" in r for r in refused)
    (cmd,) = c.slurm.calls
    assert cmd[:3] == ("srun", "--jobid=7", "--overlap") and "iptables" in cmd


def test_testcluster_down_wants_one_name_or_all(capsys):
    from chaosbench.cluster.slurm.testcluster import main
    for argv in (["down"], ["down", "cbslurm1", "--all"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and "give one NAME (see `ls`) or --all" in capsys.readouterr().err


# -- a login prefix that is a remote shell (ssh) gets one shell-quoted command ---------------------------
AWKWARD = ["step (?P<step>\\d+) loss=(?P<loss>[0-9.]+)", "x; touch {mark}", "it's \"quoted\"", "two  spaces",
           "$(touch {mark})", "`touch {mark}`", "*", ""]


def _fake_ssh(tmp_path):
    """What ssh does with its arguments: drops the host, joins the rest with spaces, runs `sh -c`."""
    ssh = tmp_path / "bin" / "ssh"
    ssh.parent.mkdir()
    ssh.write_text('#!/bin/sh\nshift\nexec sh -c "$*"\n')
    ssh.chmod(0o755)
    return ssh


def test_ssh_login_delivers_every_word_intact_and_runs_nothing_else(tmp_path, monkeypatch):
    from chaosbench.cluster.slurm.commands import Slurm
    monkeypatch.delenv("CHAOSBENCH_SLURM_LOGIN_SHELL", raising=False)
    mark = tmp_path / "ran-on-login-node"
    words = [w.format(mark=mark) for w in AWKWARD]
    slurm = Slurm([str(_fake_ssh(tmp_path)), "login1"])
    out = slurm.run("printf", "%s\\n", *words)
    assert out.split("\n")[:-1] == words
    with open(tmp_path / "log", "wb") as log:
        slurm.popen(["printf", "%s\\n", *words], log).wait(timeout=30)
    assert (tmp_path / "log").read_text().split("\n")[:-1] == words
    assert not mark.exists()


def test_srun_argv_of_a_trainer_with_a_regex_and_shell_words_survives_ssh(tmp_path):
    """The node launch: env values (the progress regex) and trainer args reach the far side as sent."""
    from chaosbench.cluster.slurm.commands import Slurm
    mark = tmp_path / "ran"
    argv = srun_argv("7", "c1", "node-0", {"CHAOSBENCH_PROGRESS_REGEX": AWKWARD[0]},
                     ["python3", "train.py", "--name", f"x; touch {mark}"])
    sent = Slurm([str(_fake_ssh(tmp_path)), "login1"]).argv(argv)
    assert sent[:2] == [str(tmp_path / "bin" / "ssh"), "login1"] and len(sent) == 3
    import shlex
    assert shlex.split(sent[2]) == argv


def test_argv_passing_prefixes_are_left_alone_and_the_choice_can_be_forced(monkeypatch):
    from chaosbench.cluster.slurm.commands import Slurm
    monkeypatch.delenv("CHAOSBENCH_SLURM_LOGIN_SHELL", raising=False)
    assert Slurm(["docker", "exec", "-i", "ctl"]).argv(["echo", "a b"]) == ["docker", "exec", "-i", "ctl", "echo", "a b"]
    assert Slurm([]).argv(["echo", "a b"]) == ["echo", "a b"]
    monkeypatch.setenv("CHAOSBENCH_SLURM_LOGIN_SHELL", "1")
    assert Slurm(["mywrapper", "login1"]).argv(["echo", "a b"]) == ["mywrapper", "login1", "echo 'a b'"]
    monkeypatch.setenv("CHAOSBENCH_SLURM_LOGIN_SHELL", "0")
    assert Slurm(["ssh", "login1"]).argv(["echo", "a b"]) == ["ssh", "login1", "echo", "a b"]


# -- a killed harness's fault rules on compute hosts are removed by the sweep ------------------------------
class _Recorder:
    """Answers like slurmctld for one dead harness's running job on c[1-2] and records every command."""

    def __init__(self, state="RUNNING", srun_fails=False):
        self.calls, self.state, self.srun_fails = [], state, srun_fails

    def run(self, *cmd, timeout=60, check=True, text=True):
        self.calls.append(list(cmd))
        if cmd[0] == "squeue":
            fmt = cmd[cmd.index("-o") + 1]
            row = {"%i": "41", "%j": "chaosbench-cbrun1", "%T": self.state, "%N": "c[1-2]",
                   "%k": f"{__import__('socket').gethostname()}:999999999:1"}   # this host, a pid that is gone
            return "|".join(row[f] for f in fmt.split("|")) + "\n"
        if cmd[:3] == ("scontrol", "show", "hostnames"):
            return "c1\nc2\n"
        if cmd[0] == "srun" and self.srun_fails:
            raise ClusterError("srun: error: job 41 not found")
        return ""


def test_sweep_removes_the_fault_chain_on_every_host_of_a_dead_harness_job_before_cancelling_it():
    rec = _Recorder()
    removed = {}
    assert allocation.sweep(rec, removed=removed) == ["41"]
    sruns = [c for c in rec.calls if c[0] == "srun" and "iptables" in " ".join(c)]
    assert len(sruns) == 1
    srun = sruns[0]
    for opt in ("--jobid=41", "--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=c[1-2]"):
        assert opt in srun
    script = srun[srun.index("-c") + 1]
    for rule in ("iptables -D INPUT -j CHAOSBENCH", "iptables -D OUTPUT -j CHAOSBENCH", "iptables -F CHAOSBENCH",
                 "iptables -X CHAOSBENCH"):
        assert rule in script
    assert rec.calls.index(srun) < rec.calls.index(["scancel", "41"])   # the hosts are ours until then
    assert removed["slurm fault rules"] == ["c1 (job 41)", "c2 (job 41)"]


def test_sweep_says_when_the_chain_could_not_be_removed_and_still_cancels(capsys):
    rec = _Recorder(srun_fails=True)
    removed = {}
    assert allocation.sweep(rec, removed=removed) == ["41"]
    assert ["scancel", "41"] in rec.calls and "slurm fault rules" not in removed
    assert "may be left" in capsys.readouterr().err


def test_sweep_of_a_pending_job_runs_no_step():
    rec = _Recorder(state="PENDING")
    assert allocation.sweep(rec) == ["41"]
    assert not [c for c in rec.calls if c[0] == "srun"]


def test_clean_lists_the_hosts_whose_fault_rules_it_removed(monkeypatch):
    from chaosbench.cluster import clean as clean_mod
    from chaosbench.cluster.slurm import commands
    rec = _Recorder()
    monkeypatch.setattr(commands, "unusable", lambda: None)
    monkeypatch.setattr(commands, "Slurm", lambda: rec)
    removed = {}
    clean_mod._slurm(False, removed)
    assert removed["slurm jobs"] == ["41"] and removed["slurm fault rules"] == ["c1 (job 41)", "c2 (job 41)"]
