"""`--backend ray`: the scenario's trainer nodes are the worker nodes of a containerised Ray cluster.

The docker backend's compose project (services, per-node NVMe and shared memory, labels swept by
owner token) with a Ray head beside the services and a Ray worker node in each trainer container
(compose.py). The nodes get ray[default,train] from the job image (cluster/jobenv: the node image plus the
pinned wheels in /opt/jobenv), so Ray is never installed where the harness runs. Training is a Ray
Train run: trainer/ray_driver.py under `docker exec` on the head, with the reference trainer's loop
(trainer/ray_loop.py) or the user's `train_loop_per_worker`. The run ends when the driver exits.

Node faults act on the containers as on docker (a killed container is a node Ray loses); the
Ray-only ones (a training worker, the raylet, the head) are in faults.py.
"""
from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.docker import cli as docker_cli
from chaosbench.cluster.docker.backend import DockerCluster
from chaosbench.cluster.docker.compose_file import PROXY_S3_PORT, dump, render
from chaosbench.cluster.docker.cli import compose, docker
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.ray import compose as ray_compose
from chaosbench.cluster.ray.compose import HEAD, STORAGE_IN_NODE
from chaosbench.cluster.ray.faults import RayFaults
from chaosbench.cluster.ray.job import RAY_REQUIREMENT, RayJob, driver_argv, refused_inputs

# what the nodes' processes cannot be given here: the node command is Ray's, not the launcher the
# docker backend wraps in the disk layer or libfaketime, and Ray's workers are not torchrun's
NOT_ON_RAY = {
    "fault_disk": "the disk layer wraps a torchrun node's command; a Ray node's command is `ray start`",
    "heal_disk": "the disk layer wraps a torchrun node's command; a Ray node's command is `ray start`",
    "disk_stats": "the disk layer wraps a torchrun node's command; a Ray node's command is `ray start`",
    "skew_clock": "libfaketime is preloaded into a torchrun node's processes, not into Ray's raylet and workers",
    "restore_clock": "libfaketime is preloaded into a torchrun node's processes, not into Ray's raylet and workers",
    "add_standby": "a standby is held by the docker go file, which a Ray worker node does not wait for",
    "release_standby": "a standby is held by the docker go file, which a Ray worker node does not wait for",
    "send_job_command": "cooperative faults reach a job through chaosbench.instrument under torchrun's worker "
                        "markers; the Ray loop does not read them yet",
}


class RayCluster(RayFaults, DockerCluster):
    backend = "ray"
    unsupported_why = {**DockerCluster.unsupported_why, **NOT_ON_RAY}

    @classmethod
    def withheld(cls) -> frozenset[str]:
        return DockerCluster.withheld() | frozenset(NOT_ON_RAY)

    def __init__(self, spec: ClusterSpec, image: str | None = None, toxiproxy_image: str | None = None,
                 gpus: bool | None = None, dashboard: bool = False):
        problems = refused_inputs(spec)
        if problems:
            raise ClusterError(f"backend 'ray' cannot run {' or '.join(problems)}")
        if RAY_REQUIREMENT not in spec.requirements:
            spec.requirements = sorted({*spec.requirements, RAY_REQUIREMENT})
        super().__init__(spec, image=image, toxiproxy_image=toxiproxy_image, gpus=False)
        self.job = RayJob.of(spec)
        self.driver: subprocess.Popen | None = None
        self.dashboard = dashboard   # the head's dashboard (Jobs API), for the address backend's tests

    # -- lifecycle -------------------------------------------------------------------------
    def _write_files(self) -> None:
        main = self.compose_dir / "docker-compose.yml"
        doc = render(self.plan, self.spec, self._nodes)
        main.write_text(dump(ray_compose.with_ray(doc, self.plan, self._nodes, self.spec.procs_per_node,
                                                  "/workspace" if self.spec.workdir else None, self.dashboard)))
        self._files = [str(main)]

    def _start(self) -> None:
        (self.run_dir / "ray-storage").mkdir(parents=True, exist_ok=True)
        super()._start()   # services and worker nodes; the nodes wait for the head's port
        compose(self.project, self._files, "up", "-d", "--no-recreate", "--no-deps", HEAD, timeout=300)

    def dashboard_address(self) -> str:
        """http://127.0.0.1:<port> of the head's dashboard: the port docker picked, read back (docker SDK)."""
        import docker as docker_sdk
        head = docker_sdk.from_env().containers.get(self.plan.container(HEAD))
        bound = (head.attrs["NetworkSettings"]["Ports"] or {}).get(f"{ray_compose.DASHBOARD_PORT}/tcp") or []
        if not bound:
            raise ClusterError(f"{head.name} publishes no dashboard port (started with dashboard=False?)")
        return f"http://127.0.0.1:{bound[0]['HostPort']}"

    def start_training(self) -> None:
        """The driver on the head: it waits for the worker nodes to join (Ray on two cores takes 20-40 s)."""
        s3 = f"http://{self.plan.ip('toxiproxy')}:{PROXY_S3_PORT}"
        argv = driver_argv(self.spec, self.job, storage_in_node=STORAGE_IN_NODE)
        env = ["-e", f"CHAOSBENCH_S3_ENDPOINT={s3}", "-e", "RAY_DEDUP_LOGS=0"]
        cwd = ["-w", "/workspace"] if self.spec.workdir else []
        log = open(self.run_dir / "logs" / "driver.log", "ab")
        with log:
            self.driver = subprocess.Popen(["docker", "exec", *env, *cwd, self.plan.container(HEAD), *argv],
                                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True, env=docker_cli._env())
        (self.run_dir / "ray.json").write_text(json.dumps({"driver": argv, "head": self.plan.container(HEAD)},
                                                          indent=1))

    def node_status(self, node: str) -> str:
        """A node's container state while the driver runs; once it has exited, every node is 'exited:<its
        code>': the Ray run is over even though the Ray nodes stay up."""
        if self.driver is not None and self.driver.poll() is not None:
            return f"exited:{self.driver.returncode}"
        return super().node_status(node)

    def collect(self) -> None:
        super().collect()
        if self.plan is None:
            return
        self._save_log(HEAD, self.run_dir / "logs" / f"{HEAD}.log")
        exits = json.loads((self.run_dir / "exits.json").read_text()) if (self.run_dir / "exits.json").exists() else {}
        exits["driver"] = {"status": "running" if self.driver and self.driver.poll() is None else "exited",
                           "exit_code": self.driver.returncode if self.driver else None}
        (self.run_dir / "exits.json").write_text(json.dumps(exits, indent=1))
        for name in (HEAD, *self._nodes):   # Ray's own record: raylet, gcs_server, worker-*.err, train/
            self._copy_ray_logs(name, self.run_dir / "logs" / "ray" / name)

    def _copy_ray_logs(self, name: str, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        docker("cp", f"{self.plan.container(name)}:/tmp/ray/session_latest/logs", str(dest), check=False, timeout=120)

    def _stop(self) -> list[str]:
        if self.driver is not None and self.driver.poll() is None:
            self.driver.kill()   # the docker CLI; its exec dies with the head's container below
            try:
                self.driver.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        return super()._stop()

    def attach_hint(self) -> str:
        return (super().attach_hint() + f"; Ray head {self.plan.container(HEAD)} "
                f"(`docker exec -it {self.plan.container(HEAD)} ray status`)")

    def record(self) -> dict:
        return {"ray_head": self.plan.container(HEAD) if self.plan else None,
                "driver": shlex.join(driver_argv(self.spec, self.job, STORAGE_IN_NODE))}
