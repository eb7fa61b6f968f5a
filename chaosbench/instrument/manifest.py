"""The checkpoint manifest (docs/manifest.md): make, write, read and verify it; name a checkpoint's files.

One implementation for everyone who meets on a checkpoint directory: the reference trainer writes
and checks it (trainer/checkpoint/fmt.py), the instrument helpers write and check it for a user's
job (chaosbench/instrument/checkpoints.py), and the harness verifies it after a fault
(chaosbench/evidence/inventory.py) and picks the data files a corruption fault should hit
(`file_roles`). It lives in chaosbench.instrument because that package is the stdlib-only part of
chaosbench that trainers already import (the reference trainer's event writer is
chaosbench.instrument.writer): importing it pulls in neither torch nor the harness.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
import zlib
from pathlib import Path

MANIFEST_FILE = "manifest.json"
DEFAULT_DATA_FILE = "state.pt"            # the data file when a manifest names none
TRAINER_FORMAT = "chaosbench-checkpoint"    # written by the reference trainer
INSTRUMENT_FORMAT = "chaosbench-instrument"  # written by chaosbench.instrument's save helpers
VERSION = 1
ALGORITHMS = ("crc32", "sha256", "blake2b")
STEP_NAME = re.compile(r"step[-_]?0*(\d+)$")                    # step-0000000040, step_40, step40
TEMP_MARKERS = (".tmp", "tmp-", ".partial", ".incomplete", "~")  # a write that never committed
ROLES = ("data", "manifest", "temporary", "other")
_CHUNK = 1 << 20


class ManifestError(ValueError):
    """A manifest is unreadable, or the bytes it describes do not match it."""


def _hasher(algo: str):
    return hashlib.new(algo) if algo in ("sha256", "blake2b") else None


def checksum(data: bytes, algo: str = "crc32") -> str:
    """Self-describing digest of bytes: "<algo>:<hex>", e.g. "crc32:1c291ca3"."""
    if algo == "crc32":
        return f"crc32:{zlib.crc32(data):08x}"
    h = _hasher(algo)
    if h is None:
        raise ManifestError(f"unknown checksum algorithm {algo!r}; valid: {', '.join(ALGORITHMS)}")
    h.update(data)
    return f"{algo}:{h.hexdigest()}"


def file_checksum(path, algo: str = "crc32") -> str | None:
    """The same digest of a file, streamed; None for an algorithm this module does not know."""
    if algo not in ALGORITHMS:
        return None
    crc, h = 0, _hasher(algo)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            if h is None:
                crc = zlib.crc32(chunk, crc)
            else:
                h.update(chunk)
    return f"crc32:{crc:08x}" if h is None else f"{algo}:{h.hexdigest()}"


def algorithm(digest: str) -> str:
    """"crc32" of "crc32:1c291ca3"."""
    return digest.split(":", 1)[0]


def make(step: int | None, file: str, nbytes: int, digest: str, *, fmt: str = TRAINER_FORMAT, **extra) -> dict:
    """A manifest for one data file (`files` in `extra` lists every file of a multi-file checkpoint)."""
    man = {"format": fmt, "version": VERSION, "file": file, "bytes": int(nbytes), "checksum": digest,
           "created": time.time(), **extra}
    if step is not None:
        man["step"] = int(step)
    return man


def encode(manifest: dict) -> bytes:
    return json.dumps(manifest, sort_keys=True).encode()


def write(directory, manifest: dict) -> None:
    """Write manifest.json into `directory` atomically (temp name, then rename over the old one)."""
    path = os.path.join(os.fspath(directory), MANIFEST_FILE)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(encode(manifest))
    os.replace(tmp, path)


def read(directory) -> dict | None:
    """The manifest of `directory` as a dict; None when absent, unreadable or not a JSON object."""
    try:
        with open(os.path.join(os.fspath(directory), MANIFEST_FILE)) as f:
            man = json.load(f)
    except (OSError, ValueError):
        return None
    return man if isinstance(man, dict) else None


def parse(text: bytes | str, where: str, fmt: str = TRAINER_FORMAT) -> dict:
    """Strict reading for a restore: the format, an int step and bytes, a known checksum algorithm."""
    try:
        m = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise ManifestError(f"{where}: manifest is not valid JSON ({e})") from None
    if not isinstance(m, dict) or m.get("format") != fmt:
        raise ManifestError(f"{where}: not a {fmt} manifest")
    for key, typ in (("step", int), ("bytes", int), ("checksum", str)):
        if not isinstance(m.get(key), typ):
            raise ManifestError(f"{where}: manifest field {key!r} missing or not {typ.__name__}")
    if algorithm(m["checksum"]) not in ALGORITHMS:
        raise ManifestError(f"{where}: unknown checksum algorithm in {m['checksum'][:20]!r}")
    return m


def verify_bytes(manifest: dict, data: bytes, where: str) -> str:
    """Raise ManifestError unless size and checksum match the manifest; return the digest."""
    if len(data) != manifest["bytes"]:
        raise ManifestError(f"{where}: size {len(data)} != manifest bytes {manifest['bytes']}")
    digest = checksum(data, algorithm(manifest["checksum"]))
    if digest != manifest["checksum"]:
        raise ManifestError(f"{where}: checksum {digest[:20]}… != manifest {manifest['checksum'][:20]}…")
    return digest


def expected_checksum(manifest: dict) -> str | None:
    """The manifest's "<algo>:<hex>" (also from the older bare `sha256` field)."""
    got = manifest.get("checksum") or (f"sha256:{manifest['sha256']}" if "sha256" in manifest else None)
    return got if isinstance(got, str) and ":" in got else None


def verify_dir(d) -> tuple[bool | None, str]:
    """(valid, why) for a checkpoint directory, lenient about the writer: any manifest that names a
    data file (`file`, default state.pt) with `checksum` (and `bytes`). None when it cannot be judged
    (no manifest, or the directory was removed while we looked: trainers rotate checkpoints)."""
    d = Path(d)
    m = d / MANIFEST_FILE
    try:
        man = json.loads(m.read_text())
    except FileNotFoundError:
        return (None, "no manifest.json") if d.exists() else (None, "removed while inspected (rotated)")
    except (ValueError, OSError) as e:
        return False, f"unreadable manifest: {e}"
    if not isinstance(man, dict):
        return False, "manifest is not a JSON object"
    data = d / str(man.get("file", DEFAULT_DATA_FILE))
    expected = expected_checksum(man)
    if expected is None:
        return False, "manifest has no checksum"
    try:
        size = data.stat().st_size
        if "bytes" in man and size != int(man["bytes"]):
            return False, f"size {size} != manifest {man['bytes']}"
        got = file_checksum(data, algorithm(expected))
    except FileNotFoundError:
        return (None, "removed while inspected (rotated)") if not m.exists() else \
            (False, f"manifest names missing file {data.name}")
    if got is None:
        return False, f"unknown checksum algorithm {algorithm(expected)!r}"
    if got != expected:
        return False, f"checksum mismatch ({got[:18]} != manifest {expected[:18]})"
    return True, f"{algorithm(expected)} checksum ok"


def step_of(d) -> int | None:
    """The step a checkpoint directory holds: its manifest's `step`, else the number in its name."""
    man = read(d)
    if man is not None and isinstance(man.get("step"), int):
        return man["step"]
    m = STEP_NAME.search(Path(d).name)
    return int(m.group(1)) if m else None


def is_temporary(relpath: str) -> bool:
    """A file or directory of a write that never committed (`.tmp-step-…`, `state.pt.tmp-123`, …)."""
    return any(marker in str(relpath).lower() for marker in TEMP_MARKERS)


def file_roles(ckpt_dir) -> dict[str, str]:
    """Every file under a checkpoint directory (path relative to it, '/'-separated) with its role:
    "manifest" (manifest.json), "temporary" (a temp marker in its name or in a folder's name),
    "data" (named by the manifest's `file` or `files`), "other" (a file the manifest does not
    name, e.g. an older save in the same folder). Without a readable manifest every file that is not
    manifest or temporary is "data": nothing says otherwise."""
    root = Path(ckpt_dir)
    man = read(root)
    named = None
    if man is not None:
        named = {str(man.get("file", DEFAULT_DATA_FILE))}
        if isinstance(man.get("files"), dict):
            named |= set(man["files"])
    roles = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            rel = (Path(dirpath) / name).relative_to(root).as_posix()
            if rel == MANIFEST_FILE:
                roles[rel] = "manifest"
            elif is_temporary(rel):
                roles[rel] = "temporary"
            else:
                roles[rel] = "data" if named is None or rel in named else "other"
    return dict(sorted(roles.items()))
