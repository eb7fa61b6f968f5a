"""Serialization, manifests and checksums.

A checkpoint is two files: `state.pt` (torch.save bytes) and `manifest.json`, which records the
step, size and sha256 of `state.pt`. The manifest is written last, so its presence marks a complete
checkpoint; the checksum catches every later corruption.
"""
from __future__ import annotations

import hashlib
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


def sha256(data) -> str:
    return hashlib.sha256(data).hexdigest()


def make_manifest(step: int, data: bytes, digest: str, **extra) -> dict:
    return {"format": FORMAT, "version": VERSION, "step": int(step), "file": STATE_FILE,
            "bytes": len(data), "sha256": digest, "created": time.time(), **extra}


def parse_manifest(text: bytes | str, where: str) -> dict:
    try:
        m = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointCorrupt(f"{where}: manifest is not valid JSON ({e})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise CheckpointCorrupt(f"{where}: not a {FORMAT} manifest")
    for key, typ in (("step", int), ("bytes", int), ("sha256", str)):
        if not isinstance(m.get(key), typ):
            raise CheckpointCorrupt(f"{where}: manifest field {key!r} missing or not {typ.__name__}")
    return m


def verify(manifest: dict, data: bytes, where: str) -> str:
    """Raise CheckpointCorrupt unless size and sha256 match; return the digest."""
    if len(data) != manifest["bytes"]:
        raise CheckpointCorrupt(f"{where}: size {len(data)} != manifest bytes {manifest['bytes']}")
    digest = sha256(data)
    if digest != manifest["sha256"]:
        raise CheckpointCorrupt(f"{where}: sha256 {digest[:12]}… != manifest {manifest['sha256'][:12]}…")
    return digest
