"""Every directory docs/byo-trainer.md's table promises exists and is writable before the job starts."""
import os
import subprocess
from pathlib import Path

from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.launch import node_plan


def _run_node_command(tmp_path: Path, **spec_kw) -> dict:
    spec = ClusterSpec(run_id="r", run_dir=tmp_path, nodes=1, min_nodes=1, max_nodes=1, workdir=str(tmp_path),
                       **spec_kw)
    # the node's "python" is echo: the launch command runs as a node would, without starting a job
    p = node_plan(spec, "node-0", python="echo", rdzv_endpoint="h:1", s3_url="http://s3", events_dir=str(tmp_path / "ev"),
                  nvme_dir=str(tmp_path / "nvme"), memory_dir=str(tmp_path / "shm"))
    subprocess.run(p.argv, env={**os.environ, **p.env}, cwd=tmp_path, check=True, capture_output=True, timeout=30)
    return p.env


def test_checkpoint_dir_exists_and_is_writable_before_a_users_script_starts(tmp_path):
    env = _run_node_command(tmp_path, job_argv=["train.py"])
    for name in ("CHAOSBENCH_CHECKPOINT_DIR", "CHAOSBENCH_NVME_DIR", "CHAOSBENCH_MEMORY_DIR", "CHAOSBENCH_EVENTS_DIR"):
        assert Path(env[name]).is_dir() and os.access(env[name], os.W_OK), name


def test_a_raw_command_gets_them_too_in_the_memory_tier(tmp_path):
    env = _run_node_command(tmp_path, command=["echo", "hi"], checkpoint_tier="memory")
    assert env["CHAOSBENCH_CHECKPOINT_DIR"] == str(tmp_path / "shm" / "checkpoints")
    assert Path(env["CHAOSBENCH_CHECKPOINT_DIR"]).is_dir()


def test_the_compose_file_keeps_the_node_commands_dollars_for_its_shell():
    """docker-compose interpolates $VAR in the file: the node command's `$` must reach the node's shell."""
    import ipaddress
    from chaosbench.cluster.docker.compose_file import ComposePlan, render
    spec = ClusterSpec(run_id="r", run_dir=Path("/tmp/x"), nodes=1, min_nodes=1, max_nodes=1, workdir="/w",
                       job_argv=["t.py", "$HOME"], progress_regex=r"step (?P<step>\d+)$")
    plan = ComposePlan(project="p", image="i", subnet=ipaddress.ip_network("10.9.0.0/24"), owner="o", events_host_dir="/e")
    cmd = render(plan, spec, ["node-0"])["services"]["node-0"]["command"]
    # what compose hands the container: every `$$` becomes `$`, and no lone `$` is left to interpolate
    assert all("$" not in a.replace("$$", "") for a in cmd), cmd
    node_argv = [a.replace("$$", "$") for a in cmd]
    assert '"$CHAOSBENCH_CHECKPOINT_DIR"' in node_argv[2] and node_argv[-1] == "$HOME"
    assert r"--progress=step (?P<step>\d+)$" in node_argv   # one word: the regex reaches the node watcher whole
