"""The `checkpoint` config section: defaults, validation and the load options."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import CheckpointConfigError

# The trainer's side of the tier names in the event contract (docs/events.md "Tiers"), fastest first;
# the harness's side is chaosbench/instrument/tiers.py.
TIERS = ("memory", "nvme", "s3")
LOCAL_TIERS = TIERS[:2]   # node-local: written by each node's local rank 0, lost with the node


@dataclass
class S3Config:
    enabled: bool = False
    interval: int = 100
    endpoint_url: str | None = None  # None → AWS default endpoint
    bucket: str = "chaosbench"
    prefix: str = "checkpoints"
    region: str = "us-east-1"
    max_retries: int = 5
    keep_last: int = 0  # 0 keeps every uploaded checkpoint
    multipart_chunk_mb: int = 8
    retry_backoff_s: float = 1.0  # first catch-up delay after a failed upload; doubles up to 30 s


@dataclass
class CheckpointConfig:
    memory_snapshot_interval: int = 10  # steps; 0 disables the memory tier
    max_snapshots: int = 2
    max_memory_mb: float = 4096
    memory_dir: str | None = None
    checkpoint_interval: int = 50  # nvme interval in steps; 0 disables the nvme tier
    nvme_dir: str | None = None
    keep_last: int = 3
    trusted_source: bool = False
    checksum: str = "crc32"  # or sha256 / blake2b (cryptographic, 5-10x slower to save and restore)
    # on SIGTERM (a preemption notice, or torchrun stopping the workers) every rank finishes its step
    # and the node-local tiers listed here save it before the process exits; [] exits at once
    save_on_stop: list = field(default_factory=lambda: ["memory"])
    stop_save_timeout_s: float = 5.0  # exit without the save if it is not done by then (keep < the grace)
    # compare a parameter digest across ranks at every save step; a mismatch (a corrupted replica)
    # restarts the job from the last checkpoint, every one of which was saved with agreeing digests
    replica_digests: bool = True
    s3: S3Config = field(default_factory=S3Config)

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None, where: str = "checkpoint") -> "CheckpointConfig":
        raw = dict(raw or {})
        s3_raw = raw.pop("s3", None) or {}
        if not isinstance(s3_raw, dict):
            raise CheckpointConfigError(f"{where}.s3: expected a mapping, got {type(s3_raw).__name__}")
        cfg = cls(**_pick(cls, raw, where, skip={"s3"}))
        cfg.s3 = S3Config(**_pick(S3Config, dict(s3_raw), f"{where}.s3"))
        cfg.validate(where)
        return cfg

    def validate(self, where: str = "checkpoint") -> None:
        for name in ("memory_snapshot_interval", "checkpoint_interval"):
            _nonneg_int(getattr(self, name), f"{where}.{name}", "use 0 to disable the tier")
        _pos_int(self.max_snapshots, f"{where}.max_snapshots")
        _pos_int(self.keep_last, f"{where}.keep_last")
        if not isinstance(self.max_memory_mb, (int, float)) or self.max_memory_mb <= 0:
            raise CheckpointConfigError(f"{where}.max_memory_mb: must be a positive number of MB, got {self.max_memory_mb!r}")
        from .fmt import ALGORITHMS
        if self.checksum not in ALGORITHMS:
            raise CheckpointConfigError(f"{where}.checksum: unknown algorithm {self.checksum!r}; "
                                        f"valid: {', '.join(ALGORITHMS)}")
        if not isinstance(self.save_on_stop, (list, tuple)) or any(t not in LOCAL_TIERS for t in self.save_on_stop):
            raise CheckpointConfigError(f"{where}.save_on_stop: a list of node-local tiers (memory, nvme), "
                                        f"got {self.save_on_stop!r}")
        if not isinstance(self.stop_save_timeout_s, (int, float)) or self.stop_save_timeout_s <= 0:
            raise CheckpointConfigError(f"{where}.stop_save_timeout_s: must be a positive number of seconds, "
                                        f"got {self.stop_save_timeout_s!r}")
        _pos_int(self.s3.interval, f"{where}.s3.interval")
        _nonneg_int(self.s3.max_retries, f"{where}.s3.max_retries", "")
        _nonneg_int(self.s3.keep_last, f"{where}.s3.keep_last", "use 0 to keep every checkpoint")
        _pos_int(self.s3.multipart_chunk_mb, f"{where}.s3.multipart_chunk_mb")
        if self.s3.enabled and not self.s3.bucket:
            raise CheckpointConfigError(f"{where}.s3.bucket: required when s3.enabled is true")

    def resolved_memory_dir(self, run_id: str, node: str) -> str:
        if self.memory_dir:
            return self.memory_dir
        return os.path.join("/dev/shm/chaosbench", run_id or "default", node)

    def resolved_nvme_dir(self, run_id: str, node: str) -> str:
        if self.nvme_dir:
            return self.nvme_dir
        return os.path.join(".chaosbench", "nvme", run_id or "default", node)

    def interval(self, tier: str) -> int:
        if tier == "memory":
            return self.memory_snapshot_interval
        if tier == "nvme":
            return self.checkpoint_interval
        return self.s3.interval if self.s3.enabled else 0


def _pick(cls, raw: dict, where: str, skip=frozenset()) -> dict:
    known = {f.name for f in fields(cls)} - set(skip)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise CheckpointConfigError(f"{where}: unknown field(s) {unknown}; valid fields: {sorted(known)}")
    return {k: v for k, v in raw.items() if v is not None or k in ("memory_dir", "nvme_dir", "endpoint_url")}


def _nonneg_int(value, name: str, hint: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CheckpointConfigError(f"{name}: must be an integer >= 0, got {value!r}" + (f" ({hint})" if hint else ""))


def _pos_int(value, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CheckpointConfigError(f"{name}: must be a positive integer, got {value!r}")
