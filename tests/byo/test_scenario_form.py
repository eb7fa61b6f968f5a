"""The user's-own-job form of `trainer:`: good files load, bad ones name the field (exit 2), and each
node runs the user's script under the harness's torchrun with the cluster's addresses."""
import subprocess
import sys
from pathlib import Path

import pytest

from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.launch import node_plan, unprepared
from chaosbench.runner import build_spec
from chaosbench.scenario import ScenarioError, load_scenario

ROOT = Path(__file__).resolve().parents[2]
BASE = "name: mine\ncluster: {nodes: 2, elastic: {min_nodes: 1, max_nodes: 2}}\nexpect: {reaches_step: 10}\n"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text("print('step 1')\n")
    return tmp_path


def load(tmp_path, trainer: str):
    p = tmp_path / "s.yaml"
    p.write_text(BASE + trainer)
    return load_scenario(p)


def problems(tmp_path, trainer: str) -> str:
    with pytest.raises(ScenarioError) as ei:
        load(tmp_path, trainer)
    return "\n".join(ei.value.problems)


def test_script_form_loads_and_builds_the_spec(project):
    s = load(project, "trainer: {workdir: proj, script: train.py, args: [--steps, '5'],\n"
                      "          progress: {regex: 'step (?P<step>\\d+)'}, checkpoint_dir: memory}\n")
    assert s.trainer.user_job and s.trainer.reference_config is None
    spec = build_spec(s, "r1", project / "run", project / "s.yaml")
    assert spec.workdir == str((project / "proj").resolve())
    assert spec.job_argv == ["train.py", "--steps", "5"] and spec.progress_regex == "step (?P<step>\\d+)"
    assert spec.checkpoint_tier == "memory" and spec.warm_start is False and spec.trainer_config == ""


@pytest.mark.parametrize("trainer, field, fix", [
    ("trainer: {script: train.py}", "trainer.workdir is missing", "relative to the scenario file"),
    ("trainer: {workdir: proj}", "trainer.workdir needs trainer.script", "train.py"),
    ("trainer: {workdir: proj, script: train.py, module: a.b}", "trainer.script or trainer.module, not both", ""),
    ("trainer: {workdir: proj, script: train.py, command: [python, x.py]}", "exclude each other", "command"),
    ("trainer: {command: [python, x.py], config: trainer/configs/tiny.yaml}", "remove them", "trainer.command"),
    ("trainer: {workdir: proj, script: train.py, progress: {regex: 'step (\\d+)'}}", "named group 'step'",
     "(?P<step>"),
    ("trainer: {workdir: proj, script: train.py, progress: {regex: 'step ((('}}", "not a valid regular", ""),
    ("trainer: {workdir: nowhere, script: train.py}", "trainer.workdir: directory 'nowhere' not found", "relative"),
    ("trainer: {workdir: proj, script: missing.py}", "trainer.script: 'missing.py' not found", "relative to"),
    ("trainer: {args: [--x]}", "trainer.args applies to your own job", "trainer.script"),
    ("trainer: {command: []}", "trainer.command is empty", ""),
    ("trainer: {workdir: proj, script: train.py, args: [--ckpt, '$CHAOSBENCH_CHECKPOINT_DIRR']}",
     "trainer.args[1]: $CHAOSBENCH_CHECKPOINT_DIRR is not a variable", "did you mean $CHAOSBENCH_CHECKPOINT_DIR?"),
    ("trainer: {command: [torchrun, '--rdzv-endpoint=${CHAOSBENCH_ENDPOINT}']}",
     "trainer.command[1]: $CHAOSBENCH_ENDPOINT is not a variable", "docs/byo-trainer.md"),
])
def test_bad_trainer_sections_name_the_field(project, trainer, field, fix):
    text = problems(project, trainer + "\n")
    assert field in text and fix in text
    assert str(project / "s.yaml") in text   # the file is named


def test_cli_validate_exits_2_on_a_bad_trainer(project):
    p = project / "bad.yaml"
    p.write_text(BASE + "trainer: {script: train.py}\n")
    r = subprocess.run([sys.executable, "-m", "chaosbench.cli", "validate", str(p)], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert "trainer.workdir is missing" in r.stderr


def _spec(**kw) -> ClusterSpec:
    return ClusterSpec(run_id="run-1", run_dir=Path("/tmp/x"), nodes=2, min_nodes=1, max_nodes=2, **kw)


def _plan(spec: ClusterSpec, **kw):
    return node_plan(spec, "node-1", python="py", rdzv_endpoint="10.0.0.1:29400", s3_url="http://s3:5000",
                     events_dir="/ev", nvme_dir="/nvme", memory_dir="/shm", **kw)


def test_user_script_runs_under_our_torchrun_and_the_node_watcher():
    spec = _spec(job_argv=["train.py", "--epochs", "2"], workdir="/home/me/proj", progress_regex="step (?P<step>\\d+)",
                 rendezvous="etcd-v3", rdzv_timeouts={"keep_alive_interval": 1})
    p = _plan(spec, workdir="/workspace")
    assert unprepared(p.argv)[:4] == ["py", "-m", "chaosbench.observer.node_watch", "--progress=step (?P<step>\\d+)"]
    launcher = p.argv[p.argv.index("--") + 1:]
    assert launcher[:3] == ["py", "-m", "torch.distributed.run"]
    assert "--nnodes=1:2" in launcher and "--rdzv-backend=etcd-v3" in launcher
    assert "--rdzv-endpoint=10.0.0.1:29400" in launcher and "--rdzv-conf=keep_alive_interval=1" in launcher
    assert launcher[-4:] == ["--tee=3", "train.py", "--epochs", "2"]
    assert p.cwd == "/workspace"
    env = p.env
    assert env["CHAOSBENCH_RDZV_ENDPOINT"] == "10.0.0.1:29400" and env["CHAOSBENCH_RDZV_BACKEND"] == "etcd-v3"
    assert env["CHAOSBENCH_CHECKPOINT_DIR"] == "/nvme/checkpoints" and env["CHAOSBENCH_S3_BUCKET"]
    assert env["CHAOSBENCH_NNODES"] == "1:2" and env["AWS_ENDPOINT_URL_S3"] == "http://s3:5000"


def test_module_form_and_memory_checkpoint_dir():
    p = _plan(_spec(job_argv=["-m", "pkg.train", "--ckpt", "$CHAOSBENCH_CHECKPOINT_DIR"], workdir="/w",
                    checkpoint_tier="memory"))
    assert p.argv[-5:] == ["--tee=3", "-m", "pkg.train", "--ckpt", "/shm/checkpoints"] and p.cwd == "/w"
    assert p.env["CHAOSBENCH_CHECKPOINT_DIR"] == "/shm/checkpoints"


def test_raw_command_gets_the_addresses_filled_in():
    spec = _spec(command=["torchrun", "--rdzv-endpoint=$CHAOSBENCH_RDZV_ENDPOINT", "--nnodes=${CHAOSBENCH_NNODES}",
                          "--rdzv-conf=$CHAOSBENCH_RDZV_CONF", "t.py", "$HOME"])
    p = _plan(spec)
    launcher = p.argv[p.argv.index("--") + 1:]
    assert launcher == ["torchrun", "--rdzv-endpoint=10.0.0.1:29400", "--nnodes=1:2",
                        "--rdzv-conf=is_host=false", "t.py", "$HOME"]


def test_reference_trainer_is_not_wrapped():
    p = _plan(_spec())
    assert "chaosbench.observer.node_watch" not in p.argv and p.cwd is None


def _compose(spec: ClusterSpec) -> dict:
    import ipaddress
    from chaosbench.cluster.docker.compose_file import ComposePlan, render
    plan = ComposePlan(project="cbt", image="chaosbench/node:x", subnet=ipaddress.ip_network("10.222.6.0/24"),
                       owner="o", events_host_dir="/ev", source_dir="/src")
    return render(plan, spec, ["node-0"])["services"]["node-0"]


def test_docker_node_mounts_the_project_read_only_and_runs_in_it():
    svc = _compose(_spec(job_argv=["train.py"], workdir="/home/me/proj"))
    assert "/home/me/proj:/workspace:ro" in svc["volumes"] and svc["working_dir"] == "/workspace"
    assert svc["image"] == "chaosbench/node:x" and unprepared(svc["command"])[0] == "python"


def test_docker_node_with_the_users_image_gets_our_source_on_pythonpath():
    svc = _compose(_spec(job_argv=["train.py"], workdir="/home/me/proj", trainer_image="me/train:1"))
    assert svc["image"] == "me/train:1" and unprepared(svc["command"])[0] == "python3"
    assert "/src:/opt/chaosbench:ro" in svc["volumes"] and svc["environment"]["PYTHONPATH"] == "/opt/chaosbench"


def test_every_variable_a_job_may_reference_is_set_on_each_node():
    from chaosbench.cluster.launch import NODE_ENV_NAMES
    env = _plan(_spec(job_argv=["train.py"], workdir="/w")).env
    assert set(NODE_ENV_NAMES) == {k for k in env if k.startswith("CHAOSBENCH_")}
