"""The proxy inside the node image (its own CPython), client and upstream on the container's eth0.

This is where bytes sent before the upstream connected were lost (see test_early_data.py);
loopback inside the container and the host did not show it.
"""
from __future__ import annotations

import subprocess
import uuid

import pytest

from chaosbench.cluster import available_backends

_why = available_backends()["docker"]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(300),
              pytest.mark.skipif(_why is not None, reason=f"docker backend unusable: {_why}")]

# Runs in the container: upstream sink and client both on eth0, 6 MiB through the proxy.
CHECK = r"""
import socket, sys, threading
from chaosbench.proxy.server import ProxyServer
ip = socket.gethostbyname(socket.gethostname())
payload = bytes((i * 7) % 251 for i in range(251 * 64)) * 391
got, done = bytearray(), threading.Event()
ls = socket.create_server((ip, 0))
def sink():
    c, _ = ls.accept()
    while (b := c.recv(1 << 20)):
        got.extend(b)
    c.close(); done.set()
threading.Thread(target=sink, daemon=True).start()
srv = ProxyServer("127.0.0.1", 0).start_in_thread()
try:
    p = srv.client().create_proxy("t", f"{ip}:{ls.getsockname()[1]}", listen=f"{ip}:0")
    with socket.create_connection((ip, p.port), timeout=20) as s:
        s.sendall(payload); s.shutdown(socket.SHUT_WR); done.wait(20)
finally:
    srv.stop()
print(sys.version.split()[0], len(got), len(payload), bytes(got) == payload)
sys.exit(0 if bytes(got) == payload else 1)
"""


@pytest.fixture(scope="module")
def image():
    from chaosbench.cluster.docker.images import node_image
    return node_image()


@pytest.mark.parametrize("splice", ["1", "0"], ids=["splice", "no-splice"])
def test_proxy_in_container_over_eth0(image, splice):
    from chaosbench.cluster.docker.images import REPO, SOURCE_MOUNT
    name = f"cbtest-proxy-{uuid.uuid4().hex[:8]}"
    try:
        r = subprocess.run(
            ["docker", "run", "--rm", "--name", name, "--label", "chaosbench.test=proxy",
             "-e", f"CHAOSBENCH_PROXY_SPLICE={splice}", "-v", f"{REPO}:{SOURCE_MOUNT}:ro",
             "-w", SOURCE_MOUNT, image, "python", "-c", CHECK],
            capture_output=True, text=True, timeout=120)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
    assert r.returncode == 0, f"in-container proxy check failed:\n{r.stdout}\n{r.stderr}"
