"""Memory pressure: a node squeezed until the kernel OOM-kills its biggest process, a worker.

The fault says how much memory the node keeps: `mb` MiB, or `fraction` of what its processes hold
at injection (anonymous and shared memory, which cannot be paged out without swap). The backend
does the squeeze (docker: the container's memory cgroup, chaosbench/cluster/docker/memory.py) and
counts the OOM kills by the heal; the heal record carries them (`oom_kills`) with the limit, so the
checks and the diagnosis read from the fault log what the kernel did.

The squeeze ends at the first OOM kill (`ended`), or at duration_s where none comes: the ballast stands
in for the worker's own growth, which dies with the worker. How long the kernel takes to kill is not
ours to set: before it kills, it reclaims the node's page cache, and the processes fault their code
back in (measured 0.1-3.7 s of such thrashing here; more than 7 s on a slower machine), so a fixed
window either cut the squeeze before the kill or held the restarted worker under it for nothing.
"""
from __future__ import annotations

import time

from pydantic import Field, model_validator

from chaosbench.faults.base import Fault, NodeParams
from chaosbench.faults.registry import register


@register
class MemoryPressure(Fault):
    name = "memory_pressure"
    help = ("squeeze a node's memory (mb MiB, or a fraction of what it holds) until the kernel OOM-kills "
            "its biggest process, a worker; its agent restarts it. Healed at that first kill (or at "
            "duration_s) by restoring the node's limit")
    needs = ("squeeze_memory", "release_memory")

    class Params(NodeParams):
        mb: int | None = Field(None, ge=8, le=1 << 22, examples=[300])               # the MiB the node keeps
        fraction: float | None = Field(None, gt=0, lt=1, examples=[0.8])  # ... or this share of what it holds

        @model_validator(mode="after")
        def _one_size(self):
            if (self.mb is None) == (self.fraction is None):
                raise ValueError("give exactly one of mb (MiB the node keeps) or fraction (of the memory "
                                 "it holds at injection), e.g. {mb: 300} or {fraction: 0.8}")
            return self

    def _inject(self):
        self.target = self.pick_node(self.p.node)
        self.squeezed = self.cluster.squeeze_memory(self.target, self.p.mb, self.p.fraction) or {}

    def ended(self) -> str | None:
        kills = self.cluster.memory_kills(self.target) if self.injected else None
        return f"the kernel OOM-killed {kills} process(es) on {self.target}" if kills else None

    def heal(self) -> float | None:
        """As Fault.heal, with what the squeeze set and saw (limit_mb, oom_kills, ...) in the record."""
        if not self.injected:
            return None
        started = time.time()
        seen = self.cluster.release_memory(self.target) or {}
        self.injected = False
        return self.ctx.log.record(self.id, self.name, "heal", self.target,
                                   {**self.p.model_dump(), **self.squeezed, **seen}, started)
