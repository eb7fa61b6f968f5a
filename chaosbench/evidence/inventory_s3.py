"""Inventory of the run's S3 bucket: every `.../step-N/` prefix verified against its manifest.

Same record shape as the local inventory (node "s3"), so `checkpoints_valid` and the restore
cross-check read both alike. An unreachable endpoint is reported as unseen, never as empty.
"""
from __future__ import annotations

import posixpath
import tempfile
from pathlib import Path

from chaosbench.instrument.manifest import MANIFEST_FILE, STEP_NAME, read, verify_dir


def s3_inventory(endpoint: str, bucket: str) -> dict:
    try:
        import boto3
        from botocore.config import Config
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                              aws_secret_access_key="testing",
                              config=Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 2},
                                            s3={"addressing_style": "path"}))
        keys: dict[str, int] = {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys.update({o["Key"]: int(o["Size"]) for o in page.get("Contents", [])})
    except Exception as e:   # the endpoint may be down (an s3_outage left in place) or the bucket absent
        return {"files": [], "checkpoints": [],
                "unseen": [{"node": "s3", "tier": "s3", "reason": f"s3://{bucket} at {endpoint}: "
                                                                  f"{type(e).__name__}: {e}"}]}
    files = [{"node": "s3", "tier": "s3", "path": k, "bytes": n, "partial": False} for k, n in sorted(keys.items())]
    ckpts, unseen = [], []
    for prefix in sorted({posixpath.dirname(k) for k in keys}):
        if not STEP_NAME.search(posixpath.basename(prefix)):
            continue
        valid, why, step = _verify(client, bucket, prefix, [k for k in keys if posixpath.dirname(k) == prefix])
        if why.startswith("download failed"):
            unseen.append({"node": "s3", "tier": "s3", "reason": f"s3://{bucket}/{prefix}: {why}"})
            continue
        ckpts.append({"node": "s3", "tier": "s3", "dir": prefix, "step": step,
                      "published": not why.startswith("upload without manifest"), "valid": valid, "reason": why})
    return {"files": files, "checkpoints": ckpts, "unseen": unseen}


def _verify(client, bucket: str, prefix: str, keys: list[str]) -> tuple[bool | None, str, int | None]:
    """Download the prefix's objects and verify them as a local directory (one checksum code)."""
    m = STEP_NAME.search(posixpath.basename(prefix))
    step = int(m.group(1)) if m else None
    with tempfile.TemporaryDirectory(prefix="chaosbench-s3-") as tmp:
        d = Path(tmp)
        try:
            for k in keys:
                client.download_file(bucket, k, str(d / posixpath.basename(k)))
        except Exception as e:
            return None, f"download failed: {type(e).__name__}: {e}", step
        man = read(d)
        if man is not None and isinstance(man.get("step"), int):
            step = man["step"]
        valid, why = verify_dir(d)
        # S3 has no atomic directory: a manifest-less prefix is an upload still in flight (the trainer
        # uploads the manifest last and lists only prefixes with one)
        if valid is None and why == f"no {MANIFEST_FILE}":
            return None, "upload without manifest (in flight or abandoned; never listed by the loader)", step
        return valid, why, step
