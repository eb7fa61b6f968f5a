"""What every launcher module gives: its pinned requirements, the per-node argv around the job's program,
its env, and a log adapter that turns its own log lines into the node watcher's agent events.

Stdlib only: the node watcher (observer/node_watch.py) imports the adapters inside a user's image that
has only python and torch. The argv takes plain fields (`Rendezvous`), not the cluster's spec, so this
package sits below the cluster in the layer table (docs/architecture.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import metadata

# the agent events the node watcher writes, whatever the launcher (docs/events.md, docs/byo-trainer.md)
AGENT_EVENTS = ("rendezvous_start", "rendezvous_done", "worker_group_failed", "worker_group_restart",
                "hang_detected", "launcher_exit")


@dataclass(frozen=True)
class Rendezvous:
    """What chaosbench/cluster/launch.py knows of one node's launch, as plain values."""
    python: str
    node: str
    node_rank: int
    min_nodes: int
    max_nodes: int
    nproc: int
    backend: str              # the scenario's cluster.rendezvous
    endpoint: str             # host:port of the rendezvous (etcd, or node-0's c10d store)
    run_id: str
    max_restarts: int
    conf: str = ""            # k=v,k=v (torchrun's --rdzv-conf)


class Launcher:
    """One launcher. Subclasses set the class attributes and override what differs from torchrun."""
    name = "torchrun"
    package: str | None = None            # the distribution whose version the report prints (None: torch's)
    requirements: tuple[str, ...] = ()    # pinned, installed beside the job (jobenv's `extra`)
    backends: tuple[str, ...] | None = None     # the backends it runs on (None: every one)
    rendezvous: tuple[str, ...] | None = None   # cluster.rendezvous values it can use (None: every one)
    needs_user_code = False               # the framework needs calls in the training loop to be judged
    trainer_module = "trainer.train"      # the reference trainer's entry under this launcher (its idiom)

    def version(self) -> str | None:
        """The version the job runs: the pin of `package` in `requirements`, else torch's as installed here."""
        for req in self.requirements:
            name, _, pinned = req.partition("==")
            if name.split("[")[0] == self.package:
                return pinned
        try:
            return metadata.version(self.package or "torch")
        except metadata.PackageNotFoundError:
            return None

    def problems(self, *, backend: str | None, rendezvous: str) -> list[str]:
        """Why this launcher cannot run with that backend / rendezvous, each with the fix ([] when it can)."""
        out = []
        if self.backends is not None and backend not in (None, "auto") and backend not in self.backends:
            out.append(f"trainer.launcher {self.name} cannot run on backend {backend}: use "
                       f"{' or '.join(self.backends)} (cluster.backend / --backend), or trainer.launcher torchrun")
        if self.rendezvous is not None and rendezvous not in self.rendezvous:
            out.append(f"trainer.launcher {self.name} rendezvouses through {' or '.join(self.rendezvous)}, not "
                       f"{rendezvous}: set cluster.rendezvous to {self.rendezvous[0]}")
        return out

    def argv(self, r: Rendezvous) -> list[str]:
        """The launcher's argv up to (not including) the program: the program follows it."""
        argv = [r.python, "-m", "torch.distributed.run",
                f"--nnodes={r.min_nodes}:{r.max_nodes}",
                f"--nproc-per-node={r.nproc}",
                f"--rdzv-backend={r.backend}",
                f"--rdzv-endpoint={r.endpoint}",
                f"--rdzv-id={r.run_id}",
                f"--max-restarts={r.max_restarts}",
                "--monitor-interval=0.1"]   # torch default; a dead worker is seen within 0.1 s
        return argv + ([f"--rdzv-conf={r.conf}"] if r.conf else [])

    def env(self, r: Rendezvous) -> dict[str, str]:
        """Variables the launcher needs on the node, beside the harness's own."""
        return {}

    def adapter(self) -> LogAdapter:
        return LogAdapter()


@dataclass
class LogAdapter:
    """Reads a launcher's own (non-worker) output lines, one at a time, and returns the agent events they
    make as (event, fields). This one reads torch elastic's agent (torchrun and the launchers built on it)."""
    lines: dict[str, str] = field(default_factory=lambda: {   # substring -> agent event
        "Rendezvous'ing worker group": "rendezvous_start",
        "Worker group FAILED": "worker_group_failed",
        "will restart worker group": "worker_group_restart",
    })
    done: str = "Rendezvous complete for workers"
    # the `k=v` lines that follow `done`: behind torch's glog prefix ("...] k=v") or indented
    field_line: re.Pattern = re.compile(r"(?:\]|^)\s+(\w+)=(.*)$")
    _rdzv: dict | None = None

    def line(self, text: str) -> list[tuple[str, dict]]:
        out = []
        if self._rdzv is not None:
            f = self.field_line.search(text)
            if f:
                self._rdzv[f.group(1)] = f.group(2).strip()
                return out
            out.append(rendezvous_done(self._rdzv))
            self._rdzv = None
        if self.done in text:
            self._rdzv = {}
            return out
        out += [(event, {"line": text.strip()[-300:]}) for needle, event in self.lines.items() if needle in text]
        return out + self.extra(text)

    def extra(self, text: str) -> list[tuple[str, dict]]:
        """Events a launcher logs beyond torch elastic's (hang detections, its own restarts)."""
        return []

    def worker_line(self, text: str) -> list[tuple[str, dict]]:
        """Agent events from a worker's own output (a framework that runs inside the workers logs there)."""
        return []


def rendezvous_done(f: dict) -> tuple[str, dict]:
    sizes = re.findall(r"\d+", f.get("global_world_sizes", ""))
    return "rendezvous_done", {"restart_count": _int(f.get("restart_count")), "nodes": _int(f.get("group_world_size")),
                               "world_size": int(sizes[0]) if sizes else None, "group_rank": _int(f.get("group_rank"))}


def _int(v, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default
