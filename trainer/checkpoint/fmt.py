"""Serialization, and the trainer's use of the checkpoint manifest (docs/manifest.md).

A checkpoint is two files: `state.pt` (torch.save bytes) and `manifest.json`, which records the
step, size and checksum of `state.pt` ("<algo>:<hex>"; crc32 by default, which catches accidental
corruption at ~1 GB/s, or sha256/blake2b for a cryptographic digest). The manifest is written
last, so its presence marks a complete checkpoint; the checksum catches every later corruption.
The manifest itself is made, parsed and verified by chaosbench.instrument.manifest, the one
implementation the harness's inventory and the instrument helpers use too.
"""
from __future__ import annotations

import io
import logging
import pickle

import torch

from chaosbench.instrument import manifest as _manifest

from .errors import CheckpointCorrupt, CheckpointLoadError

log = logging.getLogger(__name__)

FORMAT = _manifest.TRAINER_FORMAT
VERSION = _manifest.VERSION
STATE_FILE = _manifest.DEFAULT_DATA_FILE
MANIFEST_FILE = _manifest.MANIFEST_FILE
ALGORITHMS = _manifest.ALGORITHMS
checksum = _manifest.checksum          # checksum(data, algo="crc32") -> "crc32:1c291ca3"
encode_manifest = _manifest.encode


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


def make_manifest(step: int, data: bytes, digest: str, **extra) -> dict:
    return _manifest.make(step, STATE_FILE, len(data), digest, **extra)


def parse_manifest(text: bytes | str, where: str) -> dict:
    try:
        return _manifest.parse(text, where, FORMAT)
    except _manifest.ManifestError as e:
        raise CheckpointCorrupt(str(e)) from None


def verify(manifest: dict, data: bytes, where: str) -> str:
    """Raise CheckpointCorrupt unless size and checksum match; return the digest."""
    try:
        return _manifest.verify_bytes(manifest, data, where)
    except _manifest.ManifestError as e:
        raise CheckpointCorrupt(str(e)) from None
