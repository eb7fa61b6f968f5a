"""`RAY_ADDRESS=http://<head>:8265 chaosbench run ... --backend ray`: a site's own Ray cluster, reached only
through its address (the head dashboard's Jobs REST API, jobs_api.py). Nothing is started on the site but
Ray jobs, and nothing touches its machines but what those jobs do.

- the working_dir: the trainer package, the agent (agent.py, stdlib + ray) and the user's workdir, zipped
  and uploaded once per content (`gcs://_ray_pkg_<hash>.zip`);
- a preflight job imports torch, Ray Train and the loop's module with the site's image and refuses the
  run up front, naming what is missing;
- the driver: trainer/ray_driver.py --site as a job whose submission id is the run id, its metadata
  carrying the harness's owner token; its ending (SUCCEEDED / FAILED / STOPPED) is every node's status;
- events: the driver starts a fault agent per node (agent.py) that streams the node's event files into
  the driver's log; the harness polls the log (GET /api/jobs/<id>/logs), writes the marked lines to the
  run's events directory and the rest to logs/driver.log (no shared filesystem needed);
- faults: kill_worker / freeze_worker / thaw_worker / kill_raylet through the node's agent: straight to
  its port where this machine reaches the nodes, else a small job on the head asks it; the rest is
  withheld (a site's machines and head are not the harness's to kill);
- Ray's own logs (raylets, GCS, the Train controller) come from the dashboard's State API at collection;
- teardown stops the driver and removes the run's node-local directories (a cleanup job);
  `chaosbench clean` stops the jobs of a harness that is gone, found by their metadata.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import threading
import time
from pathlib import Path

from chaosbench.cluster import owner as owner_mod
from chaosbench.cluster.base import PACKAGE_ROOT, Cluster, ClusterSpec, fault_primitives
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.ray import agent
from chaosbench.cluster.ray.job import RayJob, driver_argv, refused_inputs
from chaosbench.cluster.ray.jobs_api import TERMINAL, JobsClient, package, submission_id

ADDRESS_ENV = "RAY_ADDRESS"
OWNER_KEY, RUN_KEY, ROLE_KEY = "chaosbench_owner", "chaosbench_run", "chaosbench_role"
OWN = ("kill_worker", "freeze_worker", "thaw_worker", "kill_raylet")
WITHHELD_WHY = ("a site's Ray cluster is reached only through its address (the Jobs API): its machines, "
                "containers, network and services are not the harness's to kill, pause or cut; kill_raylet "
                "stands in for a lost node (docs/ray.md, 'A site's own Ray cluster')")
HEAD_WHY = "the site's head is shared with other users and jobs: withheld on a site's Ray cluster"
_EVENT_FILE = re.compile(r"^[\w.-]+\.jsonl$")
ENDING = {"SUCCEEDED": "exited:0", "FAILED": "exited:1", "STOPPED": "exited:143"}
PREFLIGHT_S, FAULT_JOB_S, CLEANUP_S = 300, 60, 90
DIRECT_S = 3   # connecting to an agent straight from here; past it, a job on the head asks it
AGENTS_LINE, HEAD_LINE = "ray_driver: agents ", "ray_driver: driver on "
# Ray's own record worth keeping (as the docker-exec path copies it): the raylets, the GCS, the Train controller
RAY_LOGS = re.compile(r"^(raylet\.(out|err)|gcs_server\.out|train/[\w.-]+\.log)$")
LOG_POLL_S = 0.5


def address() -> str | None:
    """$RAY_ADDRESS as given (validated where a cluster is made), or None."""
    return os.environ.get(ADDRESS_ENV) or None


def working_dir_files(workdir: str | None) -> dict[str, Path | bytes]:
    """The job's working_dir: the user's workdir (if any), the trainer package and the agent with just
    enough of chaosbench around it to import (chaosbench.instrument, observer/stream.py)."""
    files: dict[str, Path | bytes] = {}
    if workdir:
        root = Path(workdir)
        files.update({str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file() and _ship(p, root)})
    for sub in ("trainer", "chaosbench/instrument"):
        base = PACKAGE_ROOT / sub
        files.update({str(p.relative_to(PACKAGE_ROOT)): p for p in base.rglob("*") if p.is_file() and _ship(p, base)})
    for name in ("chaosbench/__init__.py", "chaosbench/observer/stream.py", "chaosbench/cluster/ray/agent.py"):
        files[name] = PACKAGE_ROOT / name
    for stub in ("chaosbench/observer/__init__.py", "chaosbench/cluster/__init__.py", "chaosbench/cluster/ray/__init__.py"):
        files[stub] = b""   # packages around the agent without the harness's imports (no rich, docker, ...)
    return files


def _ship(path: Path, root: Path) -> bool:
    parts = path.relative_to(root).parts
    return not any(p in ("__pycache__", ".git", ".venv") or p.startswith(".") for p in parts) \
        and path.suffix not in (".pyc", ".pyo")


class RayAddressCluster(Cluster):
    backend = "ray"
    unsupported_why = {**{n: WITHHELD_WHY for n in fault_primitives() if n not in OWN},
                       "kill_head": HEAD_WHY, "start_head": HEAD_WHY,
                       "send_job_command": "cooperative faults write into the events directory, which a site's "
                                           "nodes do not share with the harness"}

    @classmethod
    def withheld(cls) -> frozenset[str]:
        # nvme_dir / shm_dir only say why the tiers cannot be seen; the job commands need a shared events dir
        return frozenset({"nvme_dir", "shm_dir", "send_job_command"})

    def __init__(self, spec: ClusterSpec, ray_address: str):
        problems = refused_inputs(spec)
        if problems:
            raise ClusterError(f"backend 'ray' at {ray_address} cannot run {' or '.join(problems)}")
        self.client = JobsClient(ray_address)   # validates the address (ClusterError naming RAY_ADDRESS and the fix)
        super().__init__(spec)
        self.job = RayJob.of(spec)
        if not (self.job.storage.startswith("/") or self.job.storage.startswith("s3://")):
            raise ClusterError(f"trainer.ray.storage: {self.job.storage!r} is the containerised cluster's; on a site's "
                               f"cluster ({ADDRESS_ENV}) give a directory every node shares (an absolute path as the "
                               f"nodes see it) or an s3:// URI with CHAOSBENCH_S3_ENDPOINT in cluster.env")
        # no S3 endpoint of ours on a site: the reference trainer keeps its memory and NVMe tiers
        spec.trainer_overrides.setdefault("checkpoint.s3.enabled", False)
        self.uri: str | None = None
        self.driver_id: str | None = None
        self.jobs: list[dict] = []          # every job submitted: id, role, seconds, status
        self._status: tuple[float, str] = (0.0, "PENDING")
        self._pump: threading.Thread | None = None
        self._pump_stop = threading.Event()
        self._pump_lock = threading.Lock()
        self._log_offset, self._log_rest = 0, ""
        self._faults = 0
        self.token = secrets.token_hex(16)   # the agents answer only requests carrying it (agent.TOKEN_ENV)
        self.agents: dict[str, str] = {}     # node -> its agent's host:port, from the driver's log
        self.channel: dict = {}              # direct: True (this machine reaches the agents) | False (+ why)
        self.head_ip: str | None = None      # where the driver runs (the head), from its log

    # -- lifecycle -------------------------------------------------------------------------------
    def _sweep_dead(self) -> None:
        sweep(self.client)

    def _start(self) -> None:
        self.ray_version = self.client.version().get("ray_version", "?")
        t0 = time.monotonic()
        self.uri, data = package(working_dir_files(self.spec.workdir))
        uploaded = self.client.upload(self.uri, data)
        self.package = {"uri": self.uri, "bytes": len(data), "uploaded": uploaded,
                        "seconds": round(time.monotonic() - t0, 3)}
        modules = ["trainer.train"] if self.job.reference else [self.job.loop.partition(":")[0], "trainer.ray_observe"]
        info, logs = self._job("preflight", ["preflight", *modules], PREFLIGHT_S)
        if info["status"] != "SUCCEEDED":
            found = next((json.loads(line) for line in logs.splitlines() if line.startswith('{"python"')), {})
            missing = "; ".join(found.get("missing", [])) or f"{info.get('message', '')} {logs[-600:]}".strip()
            raise ClusterError(f"the Ray cluster at {self.client.address} cannot run this job: {missing}. Fix: give the "
                               f"site's image torch and ray[train]=={self.ray_version}, or add them to the job's "
                               f"runtime_env (pip) on the site; logs: {self.run_dir / 'logs' / 'ray-preflight.log'}")

    def start_training(self) -> None:
        argv = [*driver_argv(self.spec, self.job, storage_in_node=""), "--site"]
        self.driver_id = submission_id(self.spec.run_id)
        self.client.submit("RAY_DEDUP_LOGS=0 " + shlex.join(argv), self.driver_id, self._runtime_env(),
                           self._metadata("driver"))
        self.jobs.append({"id": self.driver_id, "role": "driver", "submitted_at": time.time()})
        (self.run_dir / "ray.json").write_text(json.dumps({"address": self.client.address, "driver": argv,
                                                           "submission_id": self.driver_id,
                                                           "package": self.package}, indent=1))
        self._pump = threading.Thread(target=self._follow_logs, name="ray-job-logs", daemon=True)
        self._pump.start()

    def node_status(self, node: str) -> str:
        """Every node's status is the driver job's: 'running' until it ends, then 'exited:<0|1|143>'."""
        self._check_node(node)
        if self.driver_id is None:
            return "running"
        at, status = self._status
        if time.monotonic() - at > 1.0 and status not in TERMINAL:
            status = self.client.status(self.driver_id).get("status", "PENDING")
            self._status = (time.monotonic(), status)
        return ENDING.get(status, "running")

    def collect(self) -> None:
        if self.driver_id is None:
            return
        self._pump_stop.set()
        if self._pump is not None:
            self._pump.join(timeout=30)
        self._read_logs()   # the rest of the log, events included
        info = self.client.status(self.driver_id)
        exits = {"driver": {"status": info.get("status"), "message": info.get("message"),
                            "exit_code": {"SUCCEEDED": 0, "FAILED": 1}.get(info.get("status"))}}
        (self.run_dir / "exits.json").write_text(json.dumps(exits, indent=1))
        self._ray_logs()

    def _ray_logs(self) -> None:
        """Ray's own logs of each node and the head, through the dashboard's State API, to logs/ray/<node>/;
        what could not be read is said in logs/ray/<node>/not-fetched.txt."""
        hosts = {n: a.rpartition(":")[0] for n, a in self.agents.items()}
        if self.head_ip:
            hosts["ray-head"] = self.head_ip
        for name, ip in hosts.items():
            dest = self.run_dir / "logs" / "ray" / name
            dest.mkdir(parents=True, exist_ok=True)
            try:
                files = [f for f in {*self.client.log_files(ip), *self.client.log_files(ip, "train/*")}
                         if RAY_LOGS.match(f)]
                for f in sorted(files):
                    (dest / f).parent.mkdir(parents=True, exist_ok=True)
                    (dest / f).write_text(self.client.log_file(ip, f))
            except ClusterError as e:
                (dest / "not-fetched.txt").write_text(f"{ip}: {e}\n")

    def _stop(self) -> list[str]:
        self._pump_stop.set()
        left = []
        if self.driver_id is not None:
            try:
                if self.client.status(self.driver_id).get("status") not in TERMINAL:
                    self.client.stop(self.driver_id)
                    self.client.wait(self.driver_id, 60)
            except ClusterError as e:
                left.append(f"Ray job {self.driver_id} at {self.client.address}: {e}")
        if self.uri is not None:
            try:
                self._job("cleanup", ["cleanup", "--run", self.spec.run_id], CLEANUP_S)
            except ClusterError as e:
                left.append(f"the run's node-local directories ({', '.join(agent.node_dirs(self.spec.run_id))}): {e}")
        self._write_jobs()
        return left

    # -- faults: a small job calls the node's agent ------------------------------------------------
    def _agent_signal(self, node: str, what: str, local_rank: int, sig: str) -> list[int]:
        """Straight to the node's agent where this machine reaches the nodes; else a job on the head asks it."""
        self._check_node(node)
        if node not in self.agents and self.driver_id is not None:
            self._read_logs()
        to = self.agents.get(node)
        if to is None:
            raise ClusterError(f"{node}: no fault agent yet (the driver starts them once the nodes have joined; "
                               f"logs/driver.log)")
        if self.channel.get("direct") is not False:
            try:
                pids = agent.request(to, self.token, what, local_rank, sig, timeout_s=DIRECT_S)
                self.channel["direct"] = True
                return pids
            except OSError as e:   # not reachable from here: the head reaches it
                if self.channel.get("direct"):
                    raise ClusterError(f"{node}: its agent at {to} stopped answering: {e}") from None
                self.channel.update(direct=False, why=f"{to}: {e}")
            except RuntimeError as e:
                raise ClusterError(f"{node}: {e}") from None
        self._faults += 1
        info, logs = self._job(f"fault-{self._faults}", ["signal", "--to", to, "--node", node, "--what", what,
                                                        "--local-rank", str(local_rank), "--sig", sig], FAULT_JOB_S)
        answer = next((json.loads(line) for line in logs.splitlines() if line.startswith('{"node"')), None)
        if info["status"] != "SUCCEEDED" or answer is None:
            raise ClusterError(f"{node}: the agent could not signal the {what}: {info.get('message', '')} "
                               f"{logs.strip()[-600:]}")
        return answer["pids"]

    def kill_worker(self, node: str, local_rank: int = 0) -> None:
        """SIGKILL the node's local_rank-th Ray Train worker actor (by start), through its agent."""
        self._agent_signal(node, "worker", local_rank, "KILL")

    def freeze_worker(self, node: str, local_rank: int = 0) -> None:
        """SIGSTOP that worker through the node's agent: a hung rank whose raylet still answers."""
        self._agent_signal(node, "worker", local_rank, "STOP")

    def thaw_worker(self, node: str, local_rank: int = 0) -> None:
        self._agent_signal(node, "worker", local_rank, "CONT")

    def kill_raylet(self, node: str) -> None:
        """SIGKILL the node's raylet through its agent (which dies with it): Ray loses the node."""
        self._agent_signal(node, "raylet", 0, "KILL")

    # -- the parts ----------------------------------------------------------------------------------
    def _runtime_env(self) -> dict:
        return {"working_dir": self.uri,
                "env_vars": {**self.spec.env, "RAY_DEDUP_LOGS": "0", "CHAOSBENCH_RUN_ID": self.spec.run_id,
                             agent.TOKEN_ENV: self.token}}

    def _metadata(self, role: str) -> dict:
        return {OWNER_KEY: owner_mod.token(), RUN_KEY: self.spec.run_id, ROLE_KEY: role}

    def _job(self, role: str, agent_args: list[str], within_s: float) -> tuple[dict, str]:
        """Run `python -m chaosbench.cluster.ray.agent ...` as a job and wait for it: (details, its log)."""
        job = submission_id(self.spec.run_id, role)
        t0 = time.monotonic()
        self.client.submit(shlex.join(["python", "-m", "chaosbench.cluster.ray.agent", *agent_args]), job,
                           self._runtime_env(), self._metadata(role))
        info = self.client.wait(job, within_s)
        logs = self.client.logs(job)
        seconds = round(time.monotonic() - t0, 3)
        self.jobs.append({"id": job, "role": role, "seconds": seconds, "status": info.get("status")})
        log_dir = self.run_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / f"ray-{role.split('-')[0]}.log", "a") as f:
            f.write(f"== {job} ({seconds}s, {info.get('status')})\n{logs}")
        return info, logs

    def _write_jobs(self) -> None:
        path = self.run_dir / "ray.json"
        record = json.loads(path.read_text()) if path.exists() else {"address": self.client.address}
        record.update(jobs=self.jobs, agents=self.agents, fault_channel=self.channel)
        path.write_text(json.dumps(record, indent=1))

    def _follow_logs(self) -> None:
        while not self._pump_stop.wait(LOG_POLL_S):
            try:
                self._read_logs()
            except ClusterError:
                pass   # a dashboard that does not answer for a moment; collect() reads the rest

    def _read_logs(self) -> None:
        """New driver output: marked event lines to the events directory, the rest to logs/driver.log."""
        with self._pump_lock:
            text = self.client.logs(self.driver_id)
            new, self._log_offset = text[self._log_offset:], len(text)
            lines = (self._log_rest + new).split("\n")
            self._log_rest = lines.pop()   # a line still being written
            plain, events = split_log(lines)
            for line in plain:
                if line.startswith(AGENTS_LINE):
                    self.agents.update(json.loads(line[len(AGENTS_LINE):]))
                elif line.startswith(HEAD_LINE):
                    self.head_ip = line[len(HEAD_LINE):].strip()
            if plain:
                with open(self.run_dir / "logs" / "driver.log", "a") as f:
                    f.write("".join(line + "\n" for line in plain))
            self.events_dir.mkdir(parents=True, exist_ok=True)
            for name, rows in events.items():
                with open(self.events_dir / name, "a") as f:
                    f.write("".join(row + "\n" for row in rows))

    def record(self) -> dict:
        return {"address": self.client.address, "submission_id": self.driver_id,
                "ray_version": getattr(self, "ray_version", None), "package": getattr(self, "package", None)}

    def attach_hint(self) -> str:
        return (f"events in {self.events_dir}; Ray job {self.driver_id} at {self.client.address} "
                f"(`chaosbench clean` stops it once this harness is gone)")

    def nvme_dir(self, node: str) -> Path:
        raise ClusterError(f"{node}'s NVMe tier is node-local on the site's machine ({agent.node_env(self.spec.run_id, node)['CHAOSBENCH_NVME_DIR']}); the harness reaches only the Jobs API")

    def shm_dir(self, node: str) -> Path:
        raise ClusterError(f"{node}'s memory tier is node-local on the site's machine; the harness reaches only the Jobs API")


def split_log(lines: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """(the driver's own lines, file -> event lines) of complete log lines; an agent's line reads
    `(FaultAgent pid=.., ip=..) CBEV<TAB>events-node-0-local0.jsonl<TAB>{...}`."""
    plain, events = [], {}
    for line in lines:
        at = line.find(agent.MARK)
        if at < 0:
            plain.append(line)
            continue
        name, _, row = line[at + len(agent.MARK):].partition("\t")
        if _EVENT_FILE.match(name) and row.strip():
            events.setdefault(name, []).append(row)
    return plain, events


def sweep(client: JobsClient, everything: bool = False) -> list[str]:
    """Stop the running jobs of harnesses that are gone (everything: of live ones too), found by their
    metadata; then remove those runs' node-local directories. The ids stopped."""
    stopped, runs = [], set()
    for job in client.jobs():
        meta = job.get("metadata") or {}
        tok = meta.get(OWNER_KEY)
        if not tok or job.get("status") in TERMINAL or (owner_mod.alive(tok) and not everything):
            continue
        jid = job.get("submission_id") or job.get("job_id")
        client.stop(jid)
        stopped.append(jid)
        if meta.get(ROLE_KEY) == "driver":
            runs.add((meta.get(RUN_KEY), (job.get("runtime_env") or {}).get("working_dir")))
    for run, uri in runs:
        if run and uri:
            jid = submission_id(run, "cleanup", str(int(time.time())))
            client.submit(shlex.join(["python", "-m", "chaosbench.cluster.ray.agent", "cleanup", "--run", run]), jid,
                          {"working_dir": uri}, {OWNER_KEY: owner_mod.token(), RUN_KEY: run, ROLE_KEY: "cleanup"})
    return stopped
