"""Serialization, manifests and checksums.

A checkpoint is two files: `state.pt` (torch.save bytes) and `manifest.json`, which records the
step, size and checksum of `state.pt` ("<algo>:<hex>"; crc32 by default, which catches accidental
corruption at ~1 GB/s, or sha256/blake2b for a cryptographic digest). The manifest is written
last, so its presence marks a complete checkpoint; the checksum catches every later corruption.
"""
from __future__ import annotations

import hashlib
import zlib
import io
import json
import logging
import pickle
import time

import torch

from .errors import CheckpointCorrupt, CheckpointLoadError

log = logging.getLogger(__name__)

FORMAT = "chaosbench-checkpoint"
VERSION = 1
STATE_FILE = "state.pt"
MANIFEST_FILE = "manifest.json"


def serialize(state: dict) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def deserialize(data: bytes, trusted_source: bool = False, map_location="cpu") -> dict:
    if trusted_source:
        log.warning("loading checkpoint with trusted_source=True: full unpickling can execute arbitrary "
                    "code from the file; use it only for checkpoints you wrote yourself")
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
    try:
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointLoadError(
            "checkpoint contains objects that safe loading (torch.load weights_only=True) refuses: "
            f"{str(e).splitlines()[0]} — store only tensors/containers/primitives, or set "
            "checkpoint.trusted_source: true if you trust the file") from None


ALGORITHMS = {
    "crc32": lambda data: f"{zlib.crc32(data):08x}",
    "sha256": lambda data: hashlib.sha256(data).hexdigest(),
    "blake2b": lambda data: hashlib.blake2b(data).hexdigest(),
}


def checksum(data, algo: str = "crc32") -> str:
    """Self-describing digest, e.g. "crc32:1c291ca3"."""
    return f"{algo}:{ALGORITHMS[algo](data)}"


def make_manifest(step: int, data: bytes, digest: str, **extra) -> dict:
    return {"format": FORMAT, "version": VERSION, "step": int(step), "file": STATE_FILE,
            "bytes": len(data), "checksum": digest, "created": time.time(), **extra}


def parse_manifest(text: bytes | str, where: str) -> dict:
    try:
        m = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointCorrupt(f"{where}: manifest is not valid JSON ({e})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise CheckpointCorrupt(f"{where}: not a {FORMAT} manifest")
    for key, typ in (("step", int), ("bytes", int), ("checksum", str)):
        if not isinstance(m.get(key), typ):
            raise CheckpointCorrupt(f"{where}: manifest field {key!r} missing or not {typ.__name__}")
    if m["checksum"].split(":", 1)[0] not in ALGORITHMS:
        raise CheckpointCorrupt(f"{where}: unknown checksum algorithm in {m['checksum'][:20]!r}")
    return m


def verify(manifest: dict, data: bytes, where: str) -> str:
    """Raise CheckpointCorrupt unless size and checksum match; return the digest."""
    if len(data) != manifest["bytes"]:
        raise CheckpointCorrupt(f"{where}: size {len(data)} != manifest bytes {manifest['bytes']}")
    digest = checksum(data, manifest["checksum"].split(":", 1)[0])
    if digest != manifest["checksum"]:
        raise CheckpointCorrupt(f"{where}: checksum {digest[:20]}… != manifest {manifest['checksum'][:20]}…")
    return digest
