"""DLRover's `dlrover-run`: torch elastic's agent subclassed, rendezvousing through DLRover's job master.

`dlrover-run --standalone` starts a master only on node rank 0 and refuses every other node ("Only single
node is supported in standalone mode", dlrover/trainer/torch/elastic_run.py), so a multi-node job needs a
master all nodes reach: node-0 runs one (`--platform local`) where the c10d store would be, on the rendezvous
endpoint's port, and every agent finds it through DLROVER_MASTER_ADDR (docs/frameworks.md).
"""
from __future__ import annotations

import math

from chaosbench.launchers.base import Launcher, LogAdapter, Rendezvous

VERSION = "0.6.1"
# node-0's shell starts the master in the background, then execs the agent (same pid, same tree)
MASTER = ('"$0" -u -m dlrover.python.master.main --platform local --port "$CB_DLROVER_PORT" '
          '--node_num "$CB_DLROVER_NODES" --job_name "$CB_DLROVER_JOB" & exec "$@"')


def master_conf(conf: str) -> dict[str, int]:
    """The scenario's rdzv_timeouts in the words DLRover's master reads (training.py, whole seconds): its round
    with fewer than max_nodes closes after `lastcall_timeout` (default 60 s: a node loss waited 60 s here)."""
    given = dict(kv.split("=", 1) for kv in conf.split(",") if "=" in kv)
    out = {}
    for ours, theirs in (("join_timeout", "join_timeout"), ("last_call_timeout", "lastcall_timeout")):
        if ours in given:
            out[theirs] = max(1, math.ceil(float(given[ours])))
    return out


def _adapter() -> LogAdapter:
    """torch elastic's lines as DLRover's agent (training.py) words them: it joins its master's rendezvous
    ("attempts to join the next round"), names a failed group "The worker fails with", and restarts for
    nodes waiting to join ("new nodes ...; will restart worker group", torch's own wording)."""
    return LogAdapter(lines={"attempts to join the next round": "rendezvous_start",
                             "The worker fails with": "worker_group_failed",
                             "will restart worker group": "worker_group_restart"})


class DlroverRun(Launcher):
    name = "dlrover-run"
    package = "dlrover"
    requirements = (f"dlrover[torch]=={VERSION}",)
    rendezvous = ("c10d",)   # only for where the master lives: node-0, the c10d endpoint's host and port
    # tried on these (docs/frameworks.md); on Slurm the package must be on every node first (docs/slurm.md)
    backends = ("local", "docker")

    def argv(self, r: Rendezvous) -> list[str]:
        agent = [r.python, "-m", "dlrover.trainer.torch.main", f"--nnodes={r.min_nodes}:{r.max_nodes}",
                 f"--nproc-per-node={r.nproc}", f"--max-restarts={r.max_restarts}", "--monitor-interval=0.1"]
        conf = master_conf(r.conf)
        if conf:
            agent.append("--rdzv-conf=" + ",".join(f"{k}={v}" for k, v in conf.items()))
        return ["sh", "-c", MASTER, r.python, *agent] if r.node_rank == 0 else agent

    def adapter(self) -> LogAdapter:
        return _adapter()

    def env(self, r: Rendezvous) -> dict[str, str]:
        host, _, port = r.endpoint.rpartition(":")
        return {"DLROVER_MASTER_ADDR": r.endpoint, "NODE_RANK": str(r.node_rank), "NODE_ID": str(r.node_rank),
                "JOB_NAME": r.run_id, "CB_DLROVER_PORT": port, "CB_DLROVER_NODES": str(r.max_nodes),
                "CB_DLROVER_JOB": r.run_id}


LAUNCHER = DlroverRun()
