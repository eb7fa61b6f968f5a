"""examples/byo_deps, a DDP job that needs omegaconf (which the node image lacks), run as a user runs it:
copied out of the checkout, `chaosbench run worker_crash.yaml`. With trainer.requirements_file it
passes on docker (a derived image chaosbench/job:<hash>, the node image's /opt/venv volume still
mounted) and on local (a cached prefix); the result names the package as installed. Without it the
workers die with ModuleNotFoundError and "What to fix" names trainer.requirements. A requirement pip
cannot satisfy stops the run before any node starts, naming it and where it was declared."""
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def run_example(tmp_path, backend, edit=None, env=None):
    work = shutil.copytree(ROOT / "examples" / "byo_deps", tmp_path / "byo_deps")
    if edit:
        s = yaml.safe_load((work / "worker_crash.yaml").read_text())
        edit(s)
        (work / "worker_crash.yaml").write_text(yaml.safe_dump(s))
    r = subprocess.run([sys.executable, "-m", "chaosbench.cli", "run", "worker_crash.yaml", "--backend", backend,
                        "--report-dir", str(tmp_path / "reports"), "--quiet"], capture_output=True, text=True,
                       cwd=work, timeout=800, env={**os.environ, **(env or {})})
    runs = list((tmp_path / "reports").iterdir()) if (tmp_path / "reports").is_dir() else []
    run_dir = next((d for d in runs if (d / "result.json").is_file()), None)
    return r, run_dir


def passed(r, run_dir):
    assert run_dir is not None, (r.stdout[-2000:], r.stderr[-3000:])
    result = json.loads((run_dir / "result.json").read_text())
    status = {c["name"]: c["status"] for c in result["checks"]}
    assert r.returncode == 0 and set(status.values()) == {"passed"}, (r.stderr[-3000:], status, result.get("error"))
    assert any(p.startswith("omegaconf==") for p in result["job_packages"]), result["job_packages"]
    assert "omegaconf==" in (run_dir / "report.html").read_text()
    return result


@pytest.mark.docker
def test_the_example_with_its_own_package_passes_on_docker_in_a_derived_image(tmp_path):
    from chaosbench.cluster.docker.cli import docker_unusable
    if docker_unusable():
        pytest.skip(f"docker: {docker_unusable()}")
    r, run_dir = run_example(tmp_path, "docker")
    passed(r, run_dir)
    compose = yaml.safe_load(next((run_dir / "compose").glob("*.y*ml")).read_text())
    node, etcd = compose["services"]["node-0"], compose["services"]["etcd"]
    assert node["image"].startswith("chaosbench/job:") and etcd["image"].startswith("chaosbench/node:")
    assert "/opt/jobenv/site" in node["environment"]["PYTHONPATH"]
    # where the node image's /opt/venv volume is mounted (the test command's set-up makes it on a slow
    # storage driver), the trainer nodes mount it too: the job's packages live outside it
    venv = [v for v in etcd.get("volumes", []) if v.endswith(":/opt/venv:ro")]
    assert [v for v in node.get("volumes", []) if v.endswith(":/opt/venv:ro")] == venv


def test_the_example_with_its_own_package_passes_on_local_from_a_cached_prefix(tmp_path):
    r, run_dir = run_example(tmp_path, "local")
    passed(r, run_dir)


def test_without_its_requirements_what_to_fix_names_trainer_requirements(tmp_path):
    def drop(s):
        del s["trainer"]["requirements_file"]
        s["cluster"]["elastic"]["max_restarts"] = 0   # every worker fails the same way: end at once
    r, run_dir = run_example(tmp_path, "local", drop)
    assert r.returncode == 1 and run_dir is not None, (r.stdout[-2000:], r.stderr[-2000:])
    first = json.loads((run_dir / "diagnosis.json").read_text())["findings"][0]
    assert first["rule"] == "job_package_missing" and "requirements: [\"omegaconf\"]" in first["fix"], first


def test_a_requirement_pip_cannot_satisfy_stops_the_run_before_any_node_naming_it(tmp_path):
    def absent(s):
        s["trainer"]["requirements"] = ["chaosbench-surely-absent==1.0"]
    cache = tmp_path / "cache"
    # no index: the failure is pip's own, found in the (empty) wheelhouse, without asking the network
    r, run_dir = run_example(tmp_path, "local", absent, env={"PIP_NO_INDEX": "1", "CHAOSBENCH_CACHE": str(cache)})
    out = r.stdout + r.stderr
    assert r.returncode == 3 and "chaosbench-surely-absent==1.0" in out and "trainer.requirements" in out, out[-3000:]
    assert "worker_crash.yaml" in out, out[-3000:]
    left = [p.name for p in (cache / "jobenv").iterdir()] if (cache / "jobenv").is_dir() else []
    assert all(name.endswith(".lock") for name in left), left   # no prefix, finished or half-made


def test_two_harnesses_installing_the_same_prefix_at_once_make_it_once(tmp_path):
    from chaosbench.cluster.docker import images
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "wheels").symlink_to(images.CACHE / "wheels")   # the set-up's wheels: no index needed
    code = "from chaosbench.cluster import jobenv; print(jobenv.local_prefix(['omegaconf>=2.3']))"
    env = {**os.environ, "CHAOSBENCH_CACHE": str(cache), "PIP_NO_INDEX": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert outs[0][0] == outs[1][0] and sum("installing" in err for _, err in outs) == 1, outs
    prefix = Path(outs[0][0].strip())
    assert (prefix / "site" / "omegaconf").is_dir() and not list(prefix.parent.glob(".*-*")), list(prefix.parent.iterdir())


@pytest.mark.docker
def test_a_build_container_left_by_a_dead_harness_is_swept_by_clean(tmp_path):
    from chaosbench.cluster.clean import clean
    from chaosbench.cluster.docker import images
    from chaosbench.cluster.docker.cli import docker, docker_unusable
    from chaosbench.cluster.jobenv.image import BUILD_PREFIX, OWNER_LABEL
    if docker_unusable():
        pytest.skip(f"docker: {docker_unusable()}")
    name = f"{BUILD_PREFIX}test-{os.getpid()}"
    dead = f"{socket.gethostname()}:999999999:1"   # no such process here: its harness is gone
    docker("create", "--name", name, "--label", f"{OWNER_LABEL}={dead}", images.node_image(), "true")
    try:
        removed, _ = clean()
        assert name in removed["containers"], removed
        assert not docker("ps", "-aq", "--filter", f"name={name}").strip()
    finally:
        docker("rm", "-f", name, check=False)
