"""What each node runs: the torchrun agent + reference trainer argv (or the user's own command) and env.

Shared by every backend so docker and local nodes run the same thing; only addresses and
directories differ, and those come in as arguments.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from chaosbench import launchers
from chaosbench.cluster.base import ClusterSpec
from chaosbench.launchers import Rendezvous

S3_BUCKET = "chaosbench"
RDZV_BACKENDS = ("c10d", "c10d-links", "etcd-v3", "etcd", "etcd-v2")
# what every launched command gets (docs/byo-trainer.md); `$NAME` references in a job's argv are filled in
NODE_ENV_NAMES = ("CHAOSBENCH_EVENTS_DIR", "CHAOSBENCH_NODE", "CHAOSBENCH_RUN_ID", "CHAOSBENCH_S3_ENDPOINT",
                  "CHAOSBENCH_S3_BUCKET", "CHAOSBENCH_NVME_DIR", "CHAOSBENCH_MEMORY_DIR",
                  "CHAOSBENCH_CHECKPOINT_DIR", "CHAOSBENCH_RDZV_BACKEND", "CHAOSBENCH_RDZV_ENDPOINT",
                  "CHAOSBENCH_RDZV_CONF", "CHAOSBENCH_NNODES", "CHAOSBENCH_NPROC_PER_NODE")
REF = re.compile(r"\$(?:\{(CHAOSBENCH_\w+)\}|(CHAOSBENCH_\w+))")   # $CHAOSBENCH_X or ${CHAOSBENCH_X}
# The directories the table of variables promises (docs/byo-trainer.md) exist, writable by the job, before
# it starts, on every backend and after every node restart: a user's `torch.save($CHAOSBENCH_CHECKPOINT_DIR/x)`
# otherwise fails with "Parent directory ... does not exist" on each restart. The node's own shell creates
# them (as the job's user, on the node's own mounts), then execs the node command: same pid, same tree.
PROMISED_DIRS = ("CHAOSBENCH_CHECKPOINT_DIR", "CHAOSBENCH_NVME_DIR", "CHAOSBENCH_MEMORY_DIR", "CHAOSBENCH_EVENTS_DIR")
PREPARE = ["sh", "-c", "mkdir -p " + " ".join(f'"${n}"' for n in PROMISED_DIRS)
           + ' || echo "chaosbench: cannot create the job\'s directories" >&2; exec "$@"', "chaosbench-node"]


def prepared(argv: list[str]) -> list[str]:
    """A user's node command behind the directory-creating shell (PREPARE)."""
    return [*PREPARE, *argv]


def unprepared(argv: list[str]) -> list[str]:
    """The node command without the GO_GATE and PREPARE prefixes (what the node execs); also as a compose
    file writes it (`$$` for `$`)."""
    for prefix, extra in ((GO_GATE, 1), (PREPARE, 0)):
        head = [a.replace("$$", "$") for a in argv[:len(prefix)]]
        argv = argv[len(prefix) + extra:] if head == prefix else argv
    return argv


# A node started with its cluster waits for the run's go file, then execs its command: the container
# (and, with warm start, torch's imports: trainer/warm_start.py node) is ready when training starts.
GO_GATE = ["sh", "-c", 'while [ ! -e "$0" ]; do sleep 0.05; done; exec "$@"']
WARM_NODE = ["-m", "trainer.warm_start", "node"]


def is_warm(argv: list[str]) -> bool:
    """The node command is the warm-start node launcher (it can wait and say when it is ready itself)."""
    return argv[1:1 + len(WARM_NODE)] == WARM_NODE


def gated(argv: list[str], go_file: str, ready_file: str | None = None) -> list[str]:
    """The node command, held until `go_file` exists (a restarted node finds it and goes at once).
    A warm-start node creates `ready_file` once torch and the trainer are imported (warm_start.py)."""
    if is_warm(argv):   # the warm-start node waits itself, importing meanwhile
        at = 1 + len(WARM_NODE)
        return [*argv[:at], "--go", go_file, *(["--ready", ready_file] if ready_file else []), *argv[at:]]
    return [*GO_GATE, go_file, *argv]


def hosts_store(rendezvous: str) -> bool:
    """c10d and c10d-links: node-0's agent hosts the rendezvous store (no etcd)."""
    return rendezvous in ("c10d", "c10d-links")


@dataclass
class NodePlan:
    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None   # the user's project directory; None: the chaosbench checkout


def _fmt(value: object) -> str:
    """Override values as the trainer's `--set k=v` parser reads them (YAML scalars)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def keep_alive_problem(rendezvous: str, timeouts: dict) -> str | None:
    """torch's dynamic rendezvous (c10d, etcd-v3) sends a keep-alive only once the last one is a full
    interval old, checked once per interval: a live agent's heartbeat is routinely 2 intervals old.
    With fewer than 3 attempts agents expire themselves after a round and a joining node is never
    admitted (docs/scenario-library.md)."""
    attempts = timeouts.get("keep_alive_max_attempt")
    if rendezvous in ("c10d", "c10d-links", "etcd-v3") and attempts is not None and int(attempts) < 3:
        return (f"rdzv_timeouts.keep_alive_max_attempt={attempts}: must be >= 3 with {rendezvous} (a live "
                f"agent's heartbeat is routinely 2 intervals old, so agents would expire themselves and a "
                f"joining node is never admitted); use 3, or 4 on loaded machines")
    return None


def warm_start_argv(python: str, launcher: list[str], worker: list[str]) -> list[str]:
    """The node command with warm start (trainer/warm_start.py): the node server first, then the
    launcher, whose workers are forks of that server. `worker` is what follows `python` for a worker."""
    return [python, *WARM_NODE, "--", *launcher, "-m", "trainer.warm_start", "run", *worker]


def validate(spec: ClusterSpec) -> None:
    from chaosbench.cluster.errors import ClusterError
    problems = []
    if spec.rendezvous not in RDZV_BACKENDS:
        problems.append(f"rendezvous={spec.rendezvous!r}: use one of {', '.join(RDZV_BACKENDS)}")
    if not 1 <= spec.min_nodes <= spec.max_nodes:
        problems.append(f"min_nodes={spec.min_nodes}, max_nodes={spec.max_nodes}: need 1 <= min <= max")
    if spec.nodes < 1 or spec.procs_per_node < 1:
        problems.append("nodes and procs_per_node must be >= 1")
    if spec.nvme_size_mb < 8 or spec.shm_size_mb < 8:
        problems.append("nvme_size_mb and shm_size_mb must be >= 8")
    problem = keep_alive_problem(spec.rendezvous, spec.rdzv_timeouts)
    if problem:
        problems.append(problem)
    if problems:
        raise ClusterError("invalid cluster spec: " + "; ".join(problems))


def node_plan(spec: ClusterSpec, node: str, *, python: str, rdzv_endpoint: str, s3_url: str,
              events_dir: str, nvme_dir: str, memory_dir: str, workdir: str | None = None,
              clock_env: dict[str, str] | None = None) -> NodePlan:
    """`workdir`: where the node sees the user's project (defaults to spec.workdir, the host path);
    `clock_env`: the libfaketime preload every process of the node carries (spec.fake_clock)."""
    checkpoint_root = memory_dir if spec.checkpoint_tier == "memory" else nvme_dir
    env = {
        "CHAOSBENCH_EVENTS_DIR": events_dir,
        "CHAOSBENCH_NODE": node,
        "CHAOSBENCH_RUN_ID": spec.run_id,
        "CHAOSBENCH_S3_ENDPOINT": s3_url,
        "CHAOSBENCH_S3_BUCKET": S3_BUCKET,
        "CHAOSBENCH_NVME_DIR": nvme_dir,
        "CHAOSBENCH_MEMORY_DIR": memory_dir,
        # a user's job keeps its checkpoints here: on the node's NVMe (or shm), where faults reach them
        "CHAOSBENCH_CHECKPOINT_DIR": f"{checkpoint_root}/checkpoints",
        "CHAOSBENCH_RDZV_BACKEND": spec.rendezvous,
        "CHAOSBENCH_RDZV_ENDPOINT": rdzv_endpoint,
        "CHAOSBENCH_NNODES": f"{spec.min_nodes}:{spec.max_nodes}",
        "CHAOSBENCH_NPROC_PER_NODE": str(spec.procs_per_node),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": s3_url,
        "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python",
        "PYTHONUNBUFFERED": "1",
        # torchrun (2.4+) hands workers the agent's rendezvous store; after a restart, survivors read
        # the previous attempt's gloo addresses and hang (pytorch/pytorch#135712). A fresh store per
        # attempt avoids it for c10d/etcd; our etcd-v3 handler does the same by itself.
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "OMP_NUM_THREADS": "1",      # N nodes share few cores: oversubscribed threads make steps 10x slower
        "LOGLEVEL": "INFO",          # torchrun logs rendezvous rounds only at INFO: evidence for doctor --run
        **(clock_env or {}),
        **spec.env,
    }
    conf = dict(spec.rdzv_timeouts)
    if hosts_store(spec.rendezvous):
        # Say which agent hosts the c10d store: on one machine every node "matches" the endpoint
        # host, and whichever binds first would host it — killing that node then kills rendezvous.
        conf["is_host"] = "true" if node == "node-0" else "false"
    rdzv_conf = ",".join(f"{k}={v}" for k, v in sorted(conf.items()))
    env["CHAOSBENCH_RDZV_CONF"] = rdzv_conf
    cwd = workdir or spec.workdir
    if spec.command:   # raw argv: $CHAOSBENCH_* references are filled in, so it can form its group
        argv = [_expand(a, env) for a in spec.command]
        return NodePlan(prepared(observed_argv(python, spec, argv)), env, cwd)
    launcher = launchers.get(spec.launcher)
    r = Rendezvous(python=python, node=node, node_rank=node_rank(node), min_nodes=spec.min_nodes,
                   max_nodes=spec.max_nodes, nproc=spec.procs_per_node, backend=spec.rendezvous,
                   endpoint=rdzv_endpoint, run_id=spec.run_id, max_restarts=spec.max_restarts, conf=rdzv_conf)
    env.update(launcher.env(r))
    argv = [*launcher.argv(r), *spec.launcher_args]
    if spec.job_argv:
        # the user's script: every worker's output prefixed [default<local_rank>]: for the observer
        job = [_expand(a, env) for a in spec.job_argv]   # e.g. --ckpt-dir $CHAOSBENCH_CHECKPOINT_DIR
        return NodePlan(prepared(observed_argv(python, spec, [*argv, "--tee=3", *job])), env, cwd)
    overrides = {
        "checkpoint.nvme_dir": nvme_dir,
        "checkpoint.memory_dir": memory_dir,
        "checkpoint.s3.enabled": True,
        "checkpoint.s3.endpoint_url": s3_url,
        **spec.trainer_overrides,
    }
    # a framework that needs its calls in the loop runs the reference trainer in its idiom (torchft's Manager)
    worker = ["-m", getattr(launcher, "trainer_module", "trainer.train"), "--config", spec.trainer_config]
    for k, v in overrides.items():
        worker += ["--set", f"{k}={_fmt(v)}"]
    if spec.launcher != launchers.DEFAULT:   # the launcher's own lines become agent events (its restarts, hangs)
        return NodePlan(observed_argv(python, spec, argv + worker, agent_only=True), env)
    # Warm start: a restarted worker skips seconds of imports inside the recovery window.
    return NodePlan(warm_start_argv(python, argv, worker) if spec.warm_start else argv + worker, env)


def observed_argv(python: str, spec: ClusterSpec, launcher: list[str], agent_only: bool = False) -> list[str]:
    """A user's job runs under the node watcher (chaosbench/observer/node_watch.py), which records what
    it sees of the launcher and its workers as events: history for a job that writes none itself.
    `agent_only`: the job writes its own worker events (the reference trainer); record the launcher's."""
    argv = [python, "-m", "chaosbench.observer.node_watch"]
    if spec.launcher != launchers.DEFAULT:
        argv.append(f"--launcher={spec.launcher}")   # which log adapter reads its lines
    if agent_only:
        argv.append("--agent-only")
    if spec.progress_regex:
        argv.append(f"--progress={spec.progress_regex}")   # one word: a regex may start with '-'
    return [*argv, "--", *launcher]


def node_rank(node: str) -> int:
    """node-3 -> 3: the launchers that number their nodes themselves (dlrover-run's NODE_RANK)."""
    m = re.search(r"(\d+)$", node)
    return int(m.group(1)) if m else 0


def _expand(arg: str, env: dict[str, str]) -> str:
    """$NAME / ${NAME} of the node's CHAOSBENCH_* variables; anything else is left as written."""
    return REF.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), arg)
