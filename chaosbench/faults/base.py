"""What every fault is: a small object that injects itself into a cluster and heals itself.

Faults call only the cluster's primitives (chaosbench/cluster/base.py) and the proxy/S3 control
APIs, and every inject/heal is written to the fault log before it returns, so checks can read
exactly when the system under test was disturbed. What a fault needs from a backend is said by
`needs` / `needs_for(params)`; tests/faults/test_capabilities.py holds every fault to what it calls.
"""
from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from chaosbench.proxy.client import ProxyClient


class FaultParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


# A node a scenario names reaches container names, srun --nodelist lookups and shell words on the
# backends: only the names the harness itself gives ('node-N') pass, whatever path a fault came by.
NODE_NAME = r"^(random|node-[0-9]{1,5})$"
PEER_NAME = r"^(node-[0-9]{1,5}|etcd|s3|proxy|toxiproxy)$"


class NodeParams(FaultParams):
    node: str = Field("random", pattern=NODE_NAME)   # 'node-N', or 'random' (chosen with the run's seed)


class FaultLog:
    """Appends one JSON line per action to faults.jsonl (thread-safe, flushed per line)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def record(self, fault_id: str, fault: str, action: str, target: str, params: dict[str, Any],
               started: float | None = None) -> float:
        """`ts` is when the action started (a `docker kill` takes effect before the CLI returns, and
        survivors may notice before it does); `took_s` how long the action took."""
        now = time.time()
        ts = now if started is None else started
        line = json.dumps({"ts": ts, "id": fault_id, "fault": fault, "action": action, "target": target,
                           "params": params, "took_s": round(now - ts, 3)}, default=str)
        with self._lock, open(self.path, "a") as f:
            f.write(line + "\n")
        return ts


@dataclass
class FaultContext:
    cluster: Any                       # chaosbench.cluster.base.Cluster
    log: FaultLog
    rng: random.Random
    extra: dict[str, Any] = field(default_factory=dict)


class Fault:
    name: ClassVar[str]
    help: ClassVar[str]
    Params: ClassVar[type[FaultParams]] = FaultParams
    needs: ClassVar[tuple[str, ...]] = ()              # cluster primitives every variant calls
    default_duration_s: ClassVar[float | None] = None  # heal after this long when the scenario says nothing
    healable: ClassVar[bool] = True                    # False: a one-shot action with nothing to undo

    def __init__(self, fault_id: str, params: FaultParams, ctx: FaultContext):
        self.id = fault_id
        self.p = params
        self.ctx = ctx
        self.target = ""
        self.injected = False

    @classmethod
    def needs_for(cls, params: FaultParams) -> frozenset[str]:
        """The cluster primitives inject + heal call with these parameters. A fault whose calls
        depend on its parameters (a tier, a wipe option) overrides this."""
        return frozenset(cls.needs)

    @property
    def cluster(self):
        return self.ctx.cluster

    def proxy(self) -> ProxyClient:
        """The fault proxy's control API (close it: `with self.proxy() as p: ...`)."""
        return ProxyClient(self.cluster.proxy_api, timeout=5.0)

    def pick_node(self, node: str) -> str:
        nodes = self.cluster.node_names()
        if node == "random":
            return self.ctx.rng.choice(sorted(nodes))
        return node

    # subclasses implement these two
    def _inject(self) -> None: raise NotImplementedError
    def _heal(self) -> None: pass

    def prepare(self) -> None:
        """Called once when training starts, before any fault fires: what the fault needs in place
        ahead of its moment (add_node's standby boots here)."""

    def ended(self) -> str | None:
        """Why the fault's effect is over by itself before its duration_s ran out (a memory squeeze once
        the kernel OOM-killed): the runner then heals it at once. None: it lasts its duration."""
        return None

    def recorded(self, action: str) -> dict[str, Any]:
        """What the fault log's line for `action` ('inject' or 'heal') adds to the params, read after the
        action ran: what mechanism ran and what it did (a disk layer's counts, the writes a kill lost)."""
        return {}

    def inject(self) -> float:
        started = time.time()
        self._inject()
        self.injected = True
        return self._log("inject", started)

    def heal(self) -> float | None:
        if not (self.injected and self.healable):
            return None
        started = time.time()
        self._heal()
        self.injected = False
        return self._log("heal", started)

    def _log(self, action: str, started: float) -> float:
        return self.ctx.log.record(self.id, self.name, action, self.target,
                                   {**self.p.model_dump(), **self.recorded(action)}, started)


def start_stop(name: str, help: str, params: type[FaultParams], target: Callable[[Fault], str],
               inject: str, heal: str, args: Callable[[Fault], tuple] = lambda fault: ()) -> type[Fault]:
    """A fault that is one cluster primitive in and one out, both called with the same arguments (as
    Jepsen's node start/stopper): `inject` and `heal` name the two primitives, which are also all it
    needs; `target` picks what they act on from the fault (its params, the run's seed), and `args`
    adds what else both take (a worker's local rank)."""
    def _inject(self):
        self.target = target(self)
        getattr(self.cluster, inject)(self.target, *args(self))

    def _heal(self):
        getattr(self.cluster, heal)(self.target, *args(self))

    cls_name = "".join(w.title() for w in name.split("_"))
    return type(cls_name, (Fault,), {"name": name, "help": help, "Params": params, "needs": (inject, heal),
                                     "_inject": _inject, "_heal": _heal, "__module__": target.__module__})
