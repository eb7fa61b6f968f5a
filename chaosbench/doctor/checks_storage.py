"""Checkpoint storage: tier directories exist and are writable, space versus the expected checkpoint size."""
from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path

from .estimate import checkpoint_bytes, param_count
from .result import CheckResult, Status
from .target import Target

MB = 1024 * 1024
SHM = "/dev/shm"
DEFAULTS = {"memory_dir": "/dev/shm/chaosbench", "nvme_dir": ".chaosbench/nvme"}


def _mb(n: float) -> str:
    return f"{n / MB:,.1f} MB"


def probe_write(path: Path) -> str | None:
    """Create, fsync and remove a small file in `path`; None on success, else the error as text."""
    if not path.exists():
        parent = next((p for p in path.parents if p.exists()), Path("/"))
        if not os.access(parent, os.W_OK):
            return f"{path} does not exist and cannot be created under {parent}"
        return None   # the trainer creates it; the parent is writable
    if not path.is_dir():
        return f"{path} exists but is not a directory"
    probe = path / f".chaosbench-doctor-{uuid.uuid4().hex[:8]}"
    try:
        with open(probe, "wb") as f:
            f.write(b"x" * 4096)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        return f"cannot write to {path}: [Errno {e.errno}] {errno.errorcode.get(e.errno, '')} {e.strerror}"
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
    return None


def free_bytes(path: Path) -> tuple[int, int]:
    existing = next(p for p in [path, *path.parents] if p.exists())
    st = os.statvfs(existing)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def storage_checks(t: Target) -> list[CheckResult]:
    ck = t.checkpoint
    if not ck:
        return [CheckResult("checkpoint storage", Status.SKIP,
                            "no trainer config with a checkpoint section; pass --config or a scenario")]
    where = t.trainer_config_file or "trainer config"
    try:
        size = checkpoint_bytes(t.model)
        size_note = f"expected checkpoint ~{_mb(size)} ({param_count(t.model):,} params x 12 B: weights + Adam)"
    except (KeyError, TypeError, ValueError) as e:
        size, size_note = None, f"checkpoint size unknown ({where}: model.{e.args[0] if e.args else '?'} missing or invalid)"
    results = []
    for tier in ("nvme_dir", "memory_dir"):
        # null means the trainer's default location (trainer/checkpoint/config.py); check its base
        path = Path(str(ck.get(tier) or DEFAULTS[tier]))
        results.append(_dir_check(tier, path, size, size_note, ck))
    results.append(_shm_check(ck, size, where))
    return results


def _dir_check(tier: str, path: Path, size: int | None, size_note: str, ck: dict) -> CheckResult:
    name = f"checkpoint {tier} {path}"
    err = probe_write(path)
    if err:
        if "not a directory" in err:
            fix = f"remove the file or point checkpoint.{tier} elsewhere"
        elif "ENOSPC" in err or "EDQUOT" in err:
            fix = f"the filesystem is full: free space on it, grow the volume, or point checkpoint.{tier} elsewhere"
        elif "EROFS" in err:
            fix = f"the filesystem is mounted read-only: mount it read-write or point checkpoint.{tier} elsewhere"
        else:
            fix = (f"fix ownership/permissions (`chown` it to the training user) or set checkpoint.{tier} to a "
                   "writable directory")
        return CheckResult(name, Status.FAIL, err, fix)
    free, total = free_bytes(path)
    keep = int(ck.get("keep_last") or ck.get("max_snapshots") or 2) if tier == "nvme_dir" else \
        int(ck.get("max_snapshots") or 1)
    evidence = f"writable; {_mb(free)} free of {_mb(total)}; {size_note}"
    if size is None:
        return CheckResult(name, Status.WARN, evidence, "add d_model, n_layers, n_heads, vocab_size, "
                           "max_seq_len to the model section so the size can be checked")
    need = size * (keep + 1)   # retained checkpoints + the one being written (atomic temp file)
    if free < size:
        return CheckResult(name, Status.FAIL, f"{evidence}: not even one checkpoint fits",
                           f"free space on {path} or use a bigger volume (need >= {_mb(need)} for {keep} "
                           "retained + 1 in flight)")
    if free < need:
        return CheckResult(name, Status.WARN, f"{evidence}: {keep} retained + 1 in flight need {_mb(need)}",
                           "saves will fail with ENOSPC once retention fills up: grow the volume or lower retention")
    return CheckResult(name, Status.PASS, evidence)


def _shm_check(ck: dict, size: int | None, where: str) -> CheckResult:
    name = f"shared memory {SHM}"
    if not os.path.isdir(SHM):
        return CheckResult(name, Status.FAIL if ck.get("memory_dir") else Status.WARN, f"{SHM} does not exist",
                           "mount a tmpfs on /dev/shm (docker: --shm-size; k8s: emptyDir medium Memory)")
    free, total = free_bytes(Path(SHM))
    limit_mb = ck.get("max_memory_mb")
    evidence = f"{_mb(free)} free of {_mb(total)}"
    need = None
    if limit_mb:
        need = float(limit_mb) * MB
        evidence += f"; memory tier may use checkpoint.max_memory_mb={limit_mb}"
    if size is not None:
        evidence += f"; one snapshot ~{_mb(size)}"
        if need is not None and size > need:
            return CheckResult(name, Status.FAIL, evidence + ": a snapshot is bigger than max_memory_mb, every "
                               "memory snapshot will fail (MemoryLimitExceeded)",
                               f"raise checkpoint.max_memory_mb in {where} to >= {size / MB:.0f}")
        need = max(need or 0, size)
    if need is not None and free < need:
        return CheckResult(name, Status.FAIL, evidence + f": needs {_mb(need)}",
                           f"grow /dev/shm (docker --shm-size={int(need / MB) + 64}m, k8s emptyDir medium Memory "
                           f"sizeLimit) or lower checkpoint.max_memory_mb")
    # gloo/NCCL also use /dev/shm; the docker default of 64 MB is a classic cause of bus errors
    if total < 256 * MB:
        return CheckResult(name, Status.WARN, evidence + "; /dev/shm under 256 MB",
                           "docker's default 64 MB shm breaks NCCL and DataLoader workers: --shm-size=1g")
    return CheckResult(name, Status.PASS, evidence)
