"""Real sockets on 127.0.0.1: a proxy server in a thread and small upstream servers."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from chaosbench.proxy import ProxyClient, ProxyServer


class Upstream:
    """A threaded TCP server on a free port. mode: echo | sink | greet (send then close)."""

    def __init__(self, mode: str = "echo", payload: bytes = b""):
        self.mode, self.payload = mode, payload
        self.received = bytearray()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.addr = f"127.0.0.1:{self.port}"
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.mode == "greet":
                conn.sendall(self.payload)
                conn.close()
                return
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                self.received += data
                if self.mode == "echo":
                    conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()
        for c in self._conns:
            try:
                c.close()
            except OSError:
                pass


@pytest.fixture
def server():
    srv = ProxyServer("127.0.0.1", 0).start_in_thread()
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    c = ProxyClient(server.url, timeout=5)
    yield c
    c.close()


@pytest.fixture
def upstreams():
    made: list[Upstream] = []

    def make(mode: str = "echo", payload: bytes = b"") -> Upstream:
        made.append(Upstream(mode, payload))
        return made[-1]
    yield make
    for u in made:
        u.close()


@pytest.fixture
def echo(upstreams):
    return upstreams("echo")


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def roundtrip(sock: socket.socket, data: bytes = b"ping") -> tuple[bytes, float]:
    """Send data, read the same number of bytes back; returns (data, seconds)."""
    t = time.perf_counter()
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        part = sock.recv(65536)
        if not part:
            break
        got += part
    return got, time.perf_counter() - t


def read_all(sock: socket.socket) -> bytes:
    out = b""
    while True:
        part = sock.recv(65536)
        if not part:
            return out
        out += part
