"""Restore agreement across ranks over the default torch.distributed group.

Every rank reports the newest *verified* checkpoint it can read locally per tier; all ranks then
pick the same one: the newest step, ties going to the faster tier (memory, then nvme). Ranks that
lack it receive the bytes by broadcast from the lowest rank that holds it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from chaosbench.instrument.digest import digest

from .config import TIERS

TIER_ORDER = {t: i for i, t in enumerate(TIERS)}   # ties go to the faster tier


@dataclass
class Choice:
    tier: str
    step: int
    holders: list[int]
    size: int
    checksum: str

    @property
    def src(self) -> int:
        return min(self.holders)


def active() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank_and_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if active() else (0, 1)


def gather(obj) -> list:
    if not active():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj, src: int):
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def choose(inventories: list[dict]) -> Choice | None:
    """inventories[rank] = {tier: {"step", "bytes", "checksum"}}; the same answer on every rank."""
    best = None
    for inv in inventories:
        for tier, info in (inv or {}).items():
            key = (info["step"], -TIER_ORDER[tier])
            if best is None or key > best:
                best = key
    if best is None:
        return None
    step, tier = best[0], next(t for t, o in TIER_ORDER.items() if o == -best[1])
    holders = [r for r, inv in enumerate(inventories) if (inv or {}).get(tier, {}).get("step") == step]
    info = inventories[holders[0]][tier]
    return Choice(tier, step, holders, info["bytes"], info["checksum"])


def broadcast_bytes(data: bytes | None, size: int, src: int) -> bytes:
    """Send `data` from rank `src` to every rank (all ranks call)."""
    device = _device()
    if dist.get_rank() == src:
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    else:
        t = torch.empty(size, dtype=torch.uint8, device=device)
    dist.broadcast(t, src=src)
    return data if dist.get_rank() == src else t.cpu().numpy().tobytes()


def _device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def replica_digest(states: dict) -> str:
    """The contract's replica digest (`cb.digest`, the `param_digest` of step events: blake2b-128 over
    tensor bytes, docs/events.md) over every tensor of a nested state dict such as {"model", "optimizer"},
    keys in sorted order: equal on every rank iff the replicas hold the same tensors. Plain values (an
    optimizer's lr, a parameter group's ids) are left out: they are not what a replica silently loses."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(prefix: str, x) -> None:
        if isinstance(x, torch.Tensor):
            tensors[prefix] = x
        elif isinstance(x, dict):
            for k in sorted(x, key=str):
                walk(f"{prefix}.{k}", x[k])
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(f"{prefix}.{i}", v)
    walk("", states)
    return digest(tensors)
