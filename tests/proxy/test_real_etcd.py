"""A real etcd (gRPC over HTTP/2, long-lived streams) through the proxy, driven by etcd3."""
from __future__ import annotations

import os
import shutil
import time

import pytest

os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90),
              pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd binary not installed")]


def test_etcd_through_latency_and_a_disabled_proxy(tmp_path, client):
    etcd3 = pytest.importorskip("etcd3")
    from chaosbench.services.etcd_server import EtcdServer
    with EtcdServer(tmp_path / "etcd") as etcd:
        p = client.create_proxy("etcd", etcd.endpoint)
        kv = etcd3.client(host="127.0.0.1", port=p.port, timeout=3)
        try:
            kv.put("/chaos/k", "v1")
            assert kv.get("/chaos/k")[0] == b"v1"

            client.add_toxic("etcd", "latency", {"latency": 200})
            t = time.perf_counter()
            assert kv.get("/chaos/k")[0] == b"v1"
            assert time.perf_counter() - t >= 0.2
            client.remove_toxic("etcd", "latency_downstream")

            client.disable("etcd")                 # the link is cut: calls fail, not hang
            t = time.perf_counter()
            with pytest.raises(Exception):
                kv.get("/chaos/k")
            assert time.perf_counter() - t < 10

            client.enable("etcd")                  # the client reconnects through the proxy
            deadline = time.time() + 20
            while True:
                try:
                    kv.put("/chaos/k", "v2")
                    break
                except Exception:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.2)
            assert kv.get("/chaos/k")[0] == b"v2"
        finally:
            kv.close()
