"""The in-loop part of a save: a CPU copy of the state that later writes can use freely.

This copy is the only cost the training loop pays; serialization and checksums happen once,
lazily, on the first background writer that needs the bytes.
"""
from __future__ import annotations

import copy
import threading
import time

import torch

from . import fmt


def copy_to_cpu(obj):
    """Deep-copy a state tree, tensors to fresh CPU tensors (detached)."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        return t.to("cpu", copy=True) if t.device.type != "cpu" else t.clone()
    if isinstance(obj, dict):
        return type(obj)((k, copy_to_cpu(v)) for k, v in obj.items()) if type(obj) is not dict \
            else {k: copy_to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [copy_to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(copy_to_cpu(v) for v in obj)
    return copy.deepcopy(obj)


def tensor_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


class Snapshot:
    def __init__(self, step: int, state: dict, stall_s: float):
        self.step = step
        self.state = state
        self.stall_s = stall_s
        self.taken_at = time.time()
        self._lock = threading.Lock()
        self._data: bytes | None = None
        self._digest: str | None = None

    @classmethod
    def take(cls, step: int, state_fn) -> "Snapshot":
        t0 = time.perf_counter()
        state = copy_to_cpu(state_fn())
        return cls(step, state, time.perf_counter() - t0)

    @classmethod
    def from_bytes(cls, step: int, data: bytes, digest: str) -> "Snapshot":
        s = cls(step, None, 0.0)
        s._data, s._digest = data, digest
        return s

    def encoded(self) -> tuple[bytes, str]:
        """(bytes, sha256), computed once and shared by every tier."""
        with self._lock:
            if self._data is None:
                self._data = fmt.serialize(self.state)
                self._digest = fmt.sha256(self._data)
                self.state = None  # the bytes are the snapshot now; free the tensor copy
            return self._data, self._digest
