"""PeerLinks alone, on loopback: one connection per peer address, and a closed link is news once."""
from __future__ import annotations

import socket
import threading
import time

from chaosbench.rendezvous.links import PeerLinks


def _counting_server():
    """A listener that counts the connections it accepts and keeps them open."""
    srv = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    return srv, accepted


def test_repeated_link_calls_for_one_address_open_one_connection():
    srv, accepted = _counting_server()
    lost = []
    links = PeerLinks("127.0.0.1", on_lost=lambda node, token: lost.append(node)).start()
    try:
        address = f"127.0.0.1:{srv.getsockname()[1]}"
        for _ in range(20):                  # a watch replaying the same key many times at once
            links.link("b", address, 7)
        time.sleep(0.5)
        assert len(accepted) == 1, f"{len(accepted)} connections for one peer address"
        assert lost == [], "a duplicate connection was dropped and reported as the peer's death"
        accepted[0].close()                  # the peer dies: its end of the one link closes
        deadline = time.monotonic() + 3
        while not lost and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lost == ["b"]
    finally:
        links.stop()
        srv.close()
