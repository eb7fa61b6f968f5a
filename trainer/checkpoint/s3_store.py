"""The S3 tier: boto3 against any S3 endpoint.

Keys: <prefix>/<run_id>/step-<10-digit step>/{state.pt, manifest.json}. state.pt is uploaded
first (multipart above one chunk), the manifest last, so a listed manifest means a complete upload.
Credentials come from boto3's standard chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, profiles…).
"""
from __future__ import annotations

import io
import re

from . import fmt
from .config import S3Config
from .errors import CheckpointCorrupt, CheckpointSaveError
from .local_store import CheckpointRef, step_dir_name

MANIFEST_KEY = re.compile(r"/step-(\d{10})/manifest\.json$")


class S3Store:
    tier = "s3"

    def __init__(self, cfg: S3Config, run_id: str):
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.cfg = cfg
        self.bucket = cfg.bucket
        self.base = "/".join(p for p in (cfg.prefix.strip("/"), run_id or "default") if p)
        self.client = boto3.client(
            "s3", endpoint_url=cfg.endpoint_url, region_name=cfg.region,
            config=Config(retries={"max_attempts": max(cfg.max_retries, 1), "mode": "standard"},
                          connect_timeout=5, read_timeout=60, s3={"addressing_style": "path"}))
        chunk = cfg.multipart_chunk_mb << 20
        self.transfer = TransferConfig(multipart_threshold=chunk, multipart_chunksize=chunk,
                                       max_concurrency=4, use_threads=True)

    def __repr__(self):
        return f"S3Store(s3://{self.bucket}/{self.base} at {self.cfg.endpoint_url or 'AWS'})"

    def key(self, step: int, name: str) -> str:
        return f"{self.base}/{step_dir_name(step)}/{name}"

    def save(self, step: int, data: bytes, manifest: dict, on_published=None) -> str:
        try:
            self.client.upload_fileobj(io.BytesIO(data), self.bucket, self.key(step, fmt.STATE_FILE),
                                       Config=self.transfer)
            self.client.put_object(Bucket=self.bucket, Key=self.key(step, fmt.MANIFEST_FILE),
                                   Body=fmt.encode_manifest(manifest))
        except Exception as e:
            raise CheckpointSaveError("s3", f"upload of step {step} to {self!r} failed: {describe(e)}") from e
        if on_published is not None:   # logged before retention's listing (local_store.PUBLISHING says why)
            on_published(f"s3://{self.bucket}/{self.key(step, '')}")
        if self.cfg.keep_last:
            try:
                for ref in self.list()[self.cfg.keep_last:]:
                    self.delete(ref)
            except Exception:
                pass  # retention is best effort; the upload itself succeeded
        return f"s3://{self.bucket}/{self.key(step, '')}"

    def list(self) -> list[CheckpointRef]:
        refs = []
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.base + "/")
        for page in pages:
            for obj in page.get("Contents", ()):
                m = MANIFEST_KEY.search(obj["Key"])
                if m:
                    refs.append(CheckpointRef("s3", int(m.group(1)), obj["Key"].rsplit("/", 1)[0]))
        return sorted(refs, key=lambda r: r.step, reverse=True)

    def read(self, ref: CheckpointRef) -> tuple[bytes, dict]:
        where = f"s3://{self.bucket}/{ref.location}"
        manifest = fmt.parse_manifest(self._get(f"{ref.location}/{fmt.MANIFEST_FILE}"), where)
        if manifest["step"] != ref.step:
            raise CheckpointCorrupt(f"{where}: manifest step {manifest['step']} != key step {ref.step}")
        try:
            data = self._get(f"{ref.location}/{fmt.STATE_FILE}")
        except self.client.exceptions.NoSuchKey:
            raise CheckpointCorrupt(f"{where}: state.pt missing") from None
        fmt.verify(manifest, data, where)
        return data, manifest

    def delete(self, ref: CheckpointRef) -> None:
        for name in (fmt.MANIFEST_FILE, fmt.STATE_FILE):  # manifest first: never a manifest without data
            self.client.delete_object(Bucket=self.bucket, Key=f"{ref.location}/{name}")

    def _get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()


def describe(e: Exception) -> str:
    """One line that tells an operator what to fix."""
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
    from boto3.exceptions import S3UploadFailedError

    if isinstance(e, S3UploadFailedError) and isinstance(e.__context__, Exception):
        inner = describe(e.__context__)
        return inner if inner else str(e)
    if isinstance(e, NoCredentialsError):
        return "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or an AWS profile)"
    if isinstance(e, EndpointConnectionError):
        return f"endpoint unreachable: {e}"
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = err.get("Code", "?")
        hint = {403: " — check the credentials and the bucket policy",
                404: " — does the bucket exist?"}.get(status, "")
        return f"{code} (HTTP {status}): {err.get('Message', '')}{hint}"
    return f"{type(e).__name__}: {e}"
