"""Save/load helpers for the two common checkpoint styles that emit the checkpoint events:

- `save(obj, path, step=)` / `load(path)`: torch.save/torch.load of one file. The file is written
  to a temp name and renamed, then `manifest.json` next to it records file, step, bytes and crc32
  (docs/manifest.md, made and checked by `.manifest`, the code the harness's inventory verifies it
  with; one manifest per directory, so it describes the newest file saved there). `load` checks the
  bytes against it.
- `dcp_save(state_dict, dir, step=)` / `dcp_load(state_dict, dir)`: torch.distributed.checkpoint
  with a FileSystemWriter/Reader; the coordinator rank writes the manifest (crc32 per file).

torch is imported only when a helper is called. Events are no-ops outside chaosbench; the save and
load themselves always happen, and their errors are the caller's, as with plain torch.
"""
from __future__ import annotations

import contextlib
import os
import time

from . import manifest

MANIFEST = manifest.MANIFEST_FILE
FORMAT = manifest.INSTRUMENT_FORMAT


class ChecksumError(manifest.ManifestError):
    """The checkpoint's bytes do not match its manifest: it must not be used."""


def _ev():
    from chaosbench import instrument   # the event functions (this module is imported by it)
    return instrument


def save(obj, path, step: int | None = None, tier: str | None = None):
    """torch.save(obj, path) written atomically, plus manifest.json; emits checkpoint_saved (or
    checkpoint_failed, then re-raises). `tier` only where the path does not tell (see tier_of)."""
    import torch
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    t0 = time.monotonic()
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        os.makedirs(directory, exist_ok=True)
        torch.save(obj, tmp)
        size, digest = os.path.getsize(tmp), manifest.file_checksum(tmp)
        os.replace(tmp, path)
        manifest.write(directory, manifest.make(step, os.path.basename(path), size, digest, fmt=FORMAT))
    except BaseException as e:
        _ev().save_failed(e, tier=tier, step=step, path=path)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    took = time.monotonic() - t0
    _ev().saved(tier=tier, step=step, path=path, bytes=size, checksum=digest, stall_s=round(took, 4),
                total_s=round(took, 4))


def load(path, step: int | None = None, tier: str | None = None, source: str = "local", verify: bool = True,
         **torch_load_kwargs):
    """torch.load(path, weights_only=True, **kwargs) after checking its bytes against manifest.json; emits
    checkpoint_loaded (step from the argument, else the manifest). A mismatch emits checkpoint_invalid
    and raises ChecksumError. Without a manifest naming this file, checksum_ok is null."""
    import torch
    path = os.fspath(path)
    t0 = time.monotonic()
    size = os.path.getsize(path)
    man = manifest.read(os.path.dirname(os.path.abspath(path)))
    if man is not None and man.get("file") != os.path.basename(path):
        man = None
    if step is None and man is not None and isinstance(man.get("step"), int):
        step = man["step"]
    expected = manifest.expected_checksum(man) if man is not None else None
    digest = ok = None
    if verify:
        digest = manifest.file_checksum(path, manifest.algorithm(expected) if expected else "crc32")
        if expected is not None:
            ok = digest == expected and size == man.get("bytes", size)
    if ok is False:
        err = f"{path}: {digest}, {size} bytes; manifest says {expected}, {man.get('bytes')} bytes"
        _ev().emit("checkpoint_invalid", **_tier_fields(path, tier), step=step, path=path, error=err)
        raise ChecksumError(err)
    # explicit, not torch's default: before torch 2.6 (which pyproject allows) that default unpickles
    # anything, and a checkpoint file is input the job did not necessarily write itself
    torch_load_kwargs.setdefault("weights_only", True)
    obj = torch.load(path, **torch_load_kwargs)
    _ev().restored(tier=tier, step=step, path=path, source=source, duration_s=round(time.monotonic() - t0, 4),
                   checksum_ok=ok, checksum=digest, bytes=size)
    return obj


def _dcp_files(directory: str) -> dict[str, int]:
    return {n: os.path.getsize(os.path.join(directory, n)) for n in sorted(os.listdir(directory))
            if n != MANIFEST and os.path.isfile(os.path.join(directory, n)) and not manifest.is_temporary(n)}


def _coordinator() -> bool:
    import torch.distributed as dist
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def dcp_save(state_dict: dict, checkpoint_dir, step: int | None = None, tier: str | None = None, **save_kwargs):
    """torch.distributed.checkpoint.save to a FileSystemWriter on `checkpoint_dir` (call it on every
    rank, as dcp.save); rank 0 then writes manifest.json. Emits checkpoint_saved on every rank."""
    import torch.distributed.checkpoint as dcp
    directory = os.fspath(checkpoint_dir)
    t0 = time.monotonic()
    try:
        dcp.save(state_dict, storage_writer=dcp.FileSystemWriter(directory), **save_kwargs)
        files = _dcp_files(directory)
        if _coordinator():   # dcp.save returns on every rank only after the metadata is written
            crcs = {n: manifest.file_checksum(os.path.join(directory, n)) for n in files}
            manifest.write(directory, manifest.make(
                step, ".metadata", files.get(".metadata", 0), crcs.get(".metadata", ""), fmt=FORMAT,
                files=crcs, total_bytes=sum(files.values())))
    except BaseException as e:
        _ev().save_failed(e, tier=tier, step=step, path=directory)
        raise
    took = round(time.monotonic() - t0, 4)
    _ev().saved(tier=tier, step=step, path=directory, bytes=sum(files.values()), stall_s=took, total_s=took)


def dcp_load(state_dict: dict, checkpoint_dir, step: int | None = None, tier: str | None = None,
             source: str = "local", verify: bool = True, **load_kwargs) -> dict:
    """torch.distributed.checkpoint.load into `state_dict` (in place, as dcp.load; also returned) from
    a FileSystemReader, after checking every file named in the manifest (verify=False skips reading
    the whole checkpoint on each rank). Events as `load`."""
    import torch.distributed.checkpoint as dcp
    directory = os.fspath(checkpoint_dir)
    t0 = time.monotonic()
    man = manifest.read(directory)
    files = _dcp_files(directory)
    if step is None and man is not None and isinstance(man.get("step"), int):
        step = man["step"]
    ok = None
    if verify and man is not None and isinstance(man.get("files"), dict):
        bad = sorted(n for n, c in man["files"].items()
                     if not os.path.isfile(os.path.join(directory, n))
                     or manifest.file_checksum(os.path.join(directory, n), manifest.algorithm(str(c))) != c)
        ok = not bad
        if bad:
            err = f"{directory}: files differ from the manifest: {', '.join(bad)}"
            _ev().emit("checkpoint_invalid", **_tier_fields(directory, tier), step=step, path=directory, error=err)
            raise ChecksumError(err)
    dcp.load(state_dict, storage_reader=dcp.FileSystemReader(directory), **load_kwargs)
    _ev().restored(tier=tier, step=step, path=directory, source=source,
                   duration_s=round(time.monotonic() - t0, 4), checksum_ok=ok,
                   checksum=man.get("checksum") if ok else None, bytes=sum(files.values()))
    return state_dict


def _tier_fields(path, tier) -> dict:
    from .tiers import tier_of
    t, note = tier_of(path, tier)
    return {"tier": t, "tier_note": note}

