import contextlib
import os
import socket
import subprocess
import shutil
import uuid

import pytest
import torch


class Events:
    """A stand-in for the trainer's event writer: records (event, fields)."""

    def __init__(self):
        self.lines = []

    def __call__(self, event, fields):
        self.lines.append((event, dict(fields)))

    def of(self, name):
        return [f for e, f in self.lines if e == name]


@pytest.fixture
def events():
    return Events()


@pytest.fixture
def shm_dir():
    """A real directory in node-local shared memory, removed afterwards."""
    path = f"/dev/shm/chaosbench-test-{uuid.uuid4().hex[:8]}"
    os.makedirs(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _tmpfs(path, size, readonly=False):
    os.makedirs(path, exist_ok=True)
    opts = f"size={size}" + (",ro" if readonly else "")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)],
                          capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount tmpfs (needs root/CAP_SYS_ADMIN): {proc.stderr.strip()}")
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], timeout=30, check=False)


@pytest.fixture
def small_fs(tmp_path):
    """A real 2 MB filesystem that fills up (ENOSPC)."""
    with _tmpfs(tmp_path / "small", "2m") as path:
        yield path


@pytest.fixture
def readonly_fs(tmp_path):
    """A real read-only filesystem (EROFS even for root)."""
    with _tmpfs(tmp_path / "ro", "1m", readonly=True) as path:
        yield path


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real moto S3 server over HTTP on a free loopback port."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint, monkeypatch):
    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    name = f"ckpt-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return s3_endpoint, name
