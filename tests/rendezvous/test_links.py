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


# -- c10d-links: a peer whose link broke while its agent lives can re-link and rejoin ------------------
class _Store:
    """The slice of torch's TCPStore that LinkLiveness uses."""

    def __init__(self):
        self.kv = {}

    def set(self, key, value):
        self.kv[key] = value

    def check(self, keys):
        return all(k in self.kv for k in keys)

    def get(self, key):
        return self.kv[key]


class _Node(str):
    def __repr__(self):
        return str(self)


class _State:
    def __init__(self, *nodes):
        self.participants, self.wait_list, self.redundancy_list = [_Node(n) for n in nodes], [], []


def _until(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)
    return cond()


def _peer_agent(store, node):
    """A peer agent's link port: a listener published under the peer's node key."""
    from chaosbench.rendezvous.link_liveness import KEY
    srv, accepted = _counting_server()
    store.set(KEY + node, f"127.0.0.1:{srv.getsockname()[1]}".encode())
    return srv, accepted


def test_c10d_links_a_reset_link_to_a_live_agent_relinks_and_the_node_is_alive_again():
    from chaosbench.rendezvous.link_liveness import LinkLiveness
    store = _Store()
    srv, accepted = _peer_agent(store, "b")
    me = LinkLiveness(store, "a", "127.0.0.1")
    me._links._connect_timeout = 5.0                 # a loaded CI machine: a first connect must not time out
    me.start()
    me.relink_s = 0.2
    try:
        me.observe(_State("a", "b"))
        assert _until(lambda: len(accepted) == 1)
        accepted[0].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        accepted[0].close()                          # a TCP reset; b's agent still listens
        assert _until(lambda: "b" in me.dead())
        assert "b" not in me.alive()
        for _ in range(100):                         # the rendezvous keeps reading the state with b in it
            me.observe(_State("a", "b"))
            if "b" not in me.dead():
                break
            time.sleep(0.05)
        assert "b" not in me.dead(), "a live agent whose link was reset stays dead for good"
        assert me.alive() == {"a", "b"} and _until(lambda: len(accepted) == 2)
    finally:
        me.stop()
        srv.close()


def test_c10d_links_a_new_incarnation_at_a_new_address_is_linked_and_a_gone_agent_stays_dead():
    from chaosbench.rendezvous.link_liveness import LinkLiveness
    store = _Store()
    srv, accepted = _peer_agent(store, "b")
    me = LinkLiveness(store, "a", "127.0.0.1")
    me._links._connect_timeout = 5.0                 # a loaded CI machine: a first connect must not time out
    me.start()
    me.relink_s = 0.1
    try:
        me.observe(_State("a", "b"))
        assert _until(lambda: len(accepted) == 1)
        srv.shutdown(socket.SHUT_RDWR)               # the agent dies: port closed (wakes its accept) ...
        srv.close()
        accepted[0].close()                          # ... and its link closed
        assert _until(lambda: "b" in me.dead())
        for _ in range(10):                          # retried while in the state: refused each time
            me.observe(_State("a", "b"))
            time.sleep(0.05)
        assert "b" in me.dead()
        srv2, accepted2 = _peer_agent(store, "b")    # it comes back on the same node, new link port
        try:
            assert _until(lambda: (me.observe(_State("a", "b")), "b" not in me.dead())[1])
            assert _until(lambda: len(accepted2) == 1)   # its accept thread may run a little later
        finally:
            srv2.close()
    finally:
        me.stop()
