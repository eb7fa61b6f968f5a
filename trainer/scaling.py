"""Scaling strategies: how the global batch and gradient accumulation follow the world size.

variable_batch: each worker keeps `per_worker_batch_size`; the global batch grows and shrinks
                with the world size; one micro-batch per step.
constant_batch: the global batch stays `target_global_batch_size`; the number of micro-batches
                per worker (gradient accumulation) is recomputed for the current world size so a
                micro-batch never exceeds `per_worker_batch_size`.
"""
from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    global_batch: int
    accum_steps: int
    micro_batch: int     # upper bound of one micro-batch on one worker


def plan_batches(strategy: str, per_worker_batch_size: int, world_size: int,
                 target_global_batch_size: int | None = None) -> BatchPlan:
    if strategy == "variable_batch":
        return BatchPlan(per_worker_batch_size * world_size, 1, per_worker_batch_size)
    if strategy == "constant_batch":
        g = int(target_global_batch_size)
        if g < world_size:
            raise ValueError(f"scaling.target_global_batch_size ({g}) is smaller than the world size ({world_size})")
        per_rank = math.ceil(g / world_size)
        return BatchPlan(g, math.ceil(per_rank / per_worker_batch_size), per_worker_batch_size)
    raise ValueError(f"unknown scaling.strategy {strategy!r}")


def micro_batches(rank_ids: list[int], accum_steps: int) -> list[list[int]]:
    """Split a rank's share into `accum_steps` micro-batches, the (possibly) empty ones first.

    With DDP the last micro-batch runs the gradient all-reduce, so it must never be empty."""
    base, extra = divmod(len(rank_ids), accum_steps)
    sizes = [base + (1 if i < extra else 0) for i in range(accum_steps)][::-1]
    out, pos = [], 0
    for s in sizes:
        out.append(rank_ids[pos:pos + s])
        pos += s
    return out
