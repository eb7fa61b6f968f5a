"""The in-loop part of a save: a CPU copy of the state that later writes can use freely.

This copy is the only cost the training loop pays; serialization and checksums happen once,
lazily, on the first background writer that needs the bytes. The copies land in buffers reused
from earlier snapshots (a small pool), so a steady-state save is a plain memcpy with no
allocation or page faults; for CUDA tensors the buffers are pinned.
"""
from __future__ import annotations

import copy
import threading
import time
from collections import defaultdict

import torch

from . import fmt


class BufferPool:
    """Free CPU tensors by (shape, dtype, pinned), filled by snapshots whose bytes are encoded."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._free: dict[tuple, list[torch.Tensor]] = defaultdict(list)
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, like: torch.Tensor) -> torch.Tensor:
        pinned = like.device.type == "cuda"
        key = (tuple(like.shape), like.dtype, pinned)
        with self._lock:
            if self._free[key]:
                t = self._free[key].pop()
                self._bytes -= _nbytes(t)
                return t
        return torch.empty(like.shape, dtype=like.dtype, pin_memory=pinned)

    def put(self, tensors: list[torch.Tensor]) -> None:
        with self._lock:
            for t in tensors:
                if self._bytes + _nbytes(t) > self.max_bytes:
                    return
                self._free[(tuple(t.shape), t.dtype, t.is_pinned())].append(t)
                self._bytes += _nbytes(t)


def copy_to_cpu(obj, pool: BufferPool | None = None, out: list | None = None):
    """Deep-copy a state tree, tensors into fresh (or pooled) CPU tensors."""
    if isinstance(obj, torch.Tensor):
        src = obj.detach()
        if pool is None or not src.is_contiguous() or src.is_sparse or src.device.type not in ("cpu", "cuda"):
            return src.to("cpu", copy=True) if src.device.type != "cpu" else src.clone()
        dst = pool.get(src)
        dst.copy_(src, non_blocking=src.device.type == "cuda")
        if out is not None:
            out.append(dst)
        return dst
    if isinstance(obj, dict):
        items = [(k, copy_to_cpu(v, pool, out)) for k, v in obj.items()]
        try:
            return type(obj)(items)  # keeps OrderedDict (and its metadata-free subclasses)
        except TypeError:
            return dict(items)
    if isinstance(obj, list):
        return [copy_to_cpu(v, pool, out) for v in obj]
    if isinstance(obj, tuple):
        return tuple(copy_to_cpu(v, pool, out) for v in obj)
    return copy.deepcopy(obj)


def tensor_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return _nbytes(obj)
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Snapshot:
    def __init__(self, step: int, state: dict | None, stall_s: float, pool: BufferPool | None = None,
                 buffers: list | None = None, algo: str = "crc32"):
        self.algo = algo
        self.step = step
        self.state = state
        self.stall_s = stall_s
        self.taken_at = time.time()
        self._pool, self._buffers = pool, buffers or []
        self._lock = threading.Lock()
        self._data: bytes | None = None
        self._digest: str | None = None

    @classmethod
    def take(cls, step: int, state_fn, pool: BufferPool | None = None, algo: str = "crc32") -> "Snapshot":
        t0 = time.perf_counter()
        buffers: list = []
        state = copy_to_cpu(state_fn(), pool, buffers)
        if any(b.is_pinned() for b in buffers) and torch.cuda.is_available():
            torch.cuda.synchronize()  # non_blocking device→host copies must land before the loop goes on
        return cls(step, state, time.perf_counter() - t0, pool, buffers, algo)

    @classmethod
    def from_bytes(cls, step: int, data: bytes, digest: str) -> "Snapshot":
        s = cls(step, None, 0.0)
        s._data, s._digest = data, digest
        return s

    def encoded(self) -> tuple[bytes, str]:
        """(bytes, checksum), computed once and shared by every tier."""
        with self._lock:
            if self._data is None:
                self._data = fmt.serialize(self.state)
                self._digest = fmt.checksum(self._data, self.algo)
                # the bytes are the snapshot now: hand the tensor copies back for the next save
                self.state = None
                if self._pool is not None:
                    self._pool.put(self._buffers)
                self._buffers = []
            return self._data, self._digest
