"""Cooperative faults: they act inside the job's own process, through chaosbench.instrument.

The harness only delivers a command (`Cluster.send_job_command`: a JSON file under the events
directory); the job's `cb.step` / `cb.fault_point` picks it up and acts at the step and rank it
names, once per run, and says so with a `fault_fired` (or `fault_refused`) event. So the fault log's
inject record is the delivery, not the fault: the checks time the fault by `fault_fired`, and a
command the job never acted on counts as never injected (checks/history.py).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from chaosbench.faults.base import Fault, FaultParams
from chaosbench.faults.registry import register


class InProcessParams(FaultParams):
    rank: int | str = "random"            # the global RANK to fire on, or 'random' (the run's seed)
    step: int | None = Field(None, ge=0, le=10**9)  # fire at the first step >= this; None: the next step the job takes

    @field_validator("rank", mode="before")
    @classmethod
    def _rank(cls, v: Any):
        if v == "random" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            return v
        raise ValueError(f"rank {v!r}: give a global rank (an integer >= 0, below the world size) or 'random'")


class InProcessFault(Fault):
    """One command per fault; subclasses say what the job does with it (`action`)."""
    cooperative = True
    healable = False                       # the job acts once; nothing for the harness to undo
    needs = ("send_job_command",)

    def action(self) -> dict:
        """The command's `params`: what the instrument needs to act, by default the fault's own
        parameters (all but rank and step, which the command carries beside them)."""
        return self.p.model_dump(exclude=set(InProcessParams.model_fields))

    def world_size(self) -> int:
        spec = self.cluster.spec
        return spec.nodes * spec.procs_per_node

    def _inject(self):
        rank = self.p.rank if self.p.rank != "random" else self.ctx.rng.randrange(self.world_size())
        self.target = f"rank {rank}"
        self.cluster.send_job_command(self.id, {"fault": self.name, "rank": rank, "at_step": self.p.step,
                                                "params": self.action()})


@register
class WorkerError(InProcessFault):
    name = "worker_error"
    help = ("cooperative: one rank raises the error a real failure raises (CUDA illegal memory access, NCCL "
            "unhandled system error, or a plain exception) out of cb.step / cb.fault_point")

    class Params(InProcessParams):
        kind: Literal["cuda", "nccl", "exception"]


@register
class GilHang(InProcessFault):
    name = "gil_hang"
    help = ("cooperative: one rank holds the GIL and stops (no Python thread of it runs, heartbeats "
            "included); for hold_s seconds, or until killed")

    class Params(InProcessParams):
        hold_s: float | None = Field(None, gt=0, le=7 * 86400)   # None: until the process is killed


@register
class CorruptReplica(InProcessFault):
    name = "corrupt_replica"
    help = ("cooperative: flip bits of one element of one parameter (or of its gradient after the "
            "all-reduce) on one rank: silent data corruption; needs cb.watch(model[, optimizer])")

    class Params(InProcessParams):
        target: Literal["param", "grad"] = "param"
        bits: int = Field(1, ge=1, le=16)   # distinct bits of one element: a bf16/fp16 one has 16

    def action(self):
        return {**super().action(), "seed": self.ctx.rng.randrange(2 ** 31)}


def is_cooperative(kind: str) -> bool:
    """A fault the job itself carries out (its moment is the job's `fault_fired` event)."""
    from chaosbench.faults.registry import get_fault
    try:
        return bool(getattr(get_fault(kind), "cooperative", False))
    except KeyError:
        return False
