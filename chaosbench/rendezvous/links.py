"""Learn of a crashed agent from the connection it leaves, not from its lease running out.

A SIGKILLed process (or a killed container) has its sockets closed by the kernel at once, and the
peer reads end-of-file. So every agent listens on one TCP port (advertised in its liveness key) and
holds one idle connection to every other agent's port. When a connection it opened reads EOF or a
reset, that peer's process is gone: the agent revokes the peer's lease in etcd, and every agent's
watch sees the delete as if the lease had expired, about two seconds sooner.

A frozen node (SIGSTOP, a hung host) keeps its connections open. So both ends of a link send one
byte every `beat` seconds, and a link silent for `silence` seconds is reported too, but only as a
*suspicion*: the caller asks etcd whether the peer's lease has stopped being refreshed as well
(liveness.py), because silence alone cannot tell a frozen peer from a partition between two live
ones. A connection that cannot be opened says nothing (a firewall, a partition): only the loss of
an established connection counts.
"""
from __future__ import annotations

import errno
import logging
import selectors
import socket
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)


def advertised_host(etcd_host: str, etcd_port: int) -> str:
    """The address of the interface this host uses to reach etcd: where the peers can reach us too
    (127.0.0.1 on one machine, the container's address on a docker network, the NIC on a cluster)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((etcd_host, etcd_port))      # UDP: picks a route, sends nothing
            return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


class Deaths:
    """What a liveness answers the rendezvous (watched.py), whichever way it learns: who is dead, and
    a version bumped on every change a waiting rendezvous should wake for. Subclasses change the
    state under ``_cond`` and call ``_changed()``."""
    poll_s = 1.0     # the longest a waiting rendezvous goes without re-reading the state

    def __init__(self):
        self._cond = threading.Condition()
        self._dead: set[str] = set()
        self._version = 0
        self._stop = threading.Event()

    @property
    def version(self) -> int:
        return self._version

    def dead(self) -> frozenset[str]:
        with self._cond:
            return frozenset(self._dead)

    def wait_for_change(self, since: int, timeout: float) -> bool:
        """Block until something changed after `since` (a `version`), at most `timeout` (and poll_s) seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: self._version != since or self._stop.is_set(),
                                       min(timeout, self.poll_s))

    def _changed(self) -> None:
        self._version += 1
        self._cond.notify_all()


class PeerLinks:
    """``PeerLinks(host, on_lost, on_silent).start()``; ``link(node, "ip:port", token)`` for each peer
    seen; ``on_lost(node, token)`` runs (on the links thread) when an established link to it breaks,
    ``on_silent(node, token)`` when it has been silent for `silence` seconds (again every `silence`
    seconds while it stays silent), ``on_linked(node, token)`` once a connect to it succeeded."""

    def __init__(self, host: str, on_lost: Callable[[str, object], None],
                 on_silent: Callable[[str, object], None] | None = None, beat: float = 0.2,
                 silence: float = 1.2, connect_timeout: float = 1.0,
                 on_linked: Callable[[str, object], None] | None = None):
        self._on_lost = on_lost
        self._on_silent = on_silent
        self._on_linked = on_linked      # a link is up (again): a peer once lost may be back
        self.beat, self.silence = beat, silence
        self._heard: dict[socket.socket, float] = {}   # every link's last byte received
        self._quiet: dict[socket.socket, float] = {}   # outgoing link -> when its silence was last reported
        self._connect_timeout = connect_timeout
        self._sel = selectors.DefaultSelector()
        self._listener = socket.create_server(("0.0.0.0" if host != "127.0.0.1" else host, 0))
        self._listener.setblocking(False)
        self.address = f"{host}:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._out: dict[str, tuple[socket.socket, str, object]] = {}   # node -> (sock, address, token)
        self._todo: list[tuple[str, socket.socket, str | None]] = []    # (op, sock, node) for the loop
        self._pending: set[tuple[str, str, object]] = set()              # connects under way
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rdzv-links", daemon=True)

    def start(self) -> "PeerLinks":
        self._sel.register(self._listener, selectors.EVENT_READ, ("accept", None))
        self._sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._thread.start()
        return self

    def link(self, node: str, address: str, token: object) -> None:
        """Hold a connection to `node` at `address`; a new address or token replaces the old link."""
        with self._lock:
            held = self._out.get(node)
            if (held is not None and held[1:] == (address, token)) or (node, address, token) in self._pending:
                return                         # held, or being connected: one connect per address
            self._pending.add((node, address, token))
        threading.Thread(target=self._connect, args=(node, address, token), daemon=True,
                         name=f"rdzv-link-{node}").start()

    def forget(self, node: str) -> None:
        """The peer left on its own (its key was deleted): its closing link is no news."""
        with self._lock:
            held = self._out.pop(node, None)
            if held is not None:
                self._todo.append(("drop", held[0], None))
        self._wake()

    def stop(self) -> None:
        self._stop.set()
        self._wake()
        self._thread.join(timeout=2)
        with self._lock:
            held, self._out = list(self._out.values()), {}
        for sock, _, _ in held:
            sock.close()
        for s in (self._listener, self._wake_r, self._wake_w):
            s.close()

    # -- the links thread ----------------------------------------------------------------------
    def _connect(self, node: str, address: str, token: object) -> None:
        host, port = address.rsplit(":", 1)
        try:
            sock = socket.create_connection((host, int(port)), timeout=self._connect_timeout)
        except OSError as exc:   # unreachable now: the lease decides about this node
            log.info("no link to %s at %s (%s); its lease alone tells of its death", node, address, exc)
            sock = None
        if sock is not None and self._on_linked is not None:
            # before the loop can see the socket: a loss it finds there is reported after this, never
            # undone by it (a reset right after the connect once left a dead peer marked alive)
            self._on_linked(node, token)
        with self._lock:   # no longer pending, and (if connected) held, in one step for link()
            self._pending.discard((node, address, token))
            if sock is None:
                return
            sock.setblocking(False)
            old = self._out.get(node)
            self._out[node] = (sock, address, token)
            if old is not None:
                self._todo.append(("drop", old[0], None))
            self._todo.append(("add", sock, node))
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _drop(self, sock: socket.socket) -> None:
        self._heard.pop(sock, None)
        self._quiet.pop(sock, None)
        try:
            self._sel.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()

    def _loop(self) -> None:
        next_beat = time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self.beat
                self._beat()
            for key, _ in self._sel.select(timeout=max(next_beat - time.monotonic(), 0.0)):
                kind, node = key.data
                if kind == "wake":
                    self._wake_r.recv(4096)
                    self._apply()
                elif kind == "accept":
                    self._accept()
                elif kind == "in":
                    self._read(key.fileobj, None)
                else:
                    self._read(key.fileobj, node)

    def _apply(self) -> None:
        """Selector changes happen on this thread only (selectors are not thread-safe)."""
        with self._lock:
            todo, self._todo = self._todo, []
        for op, sock, node in todo:
            if op == "drop":
                self._drop(sock)
            else:
                self._sel.register(sock, selectors.EVENT_READ, ("out", node))
                self._heard[sock] = time.monotonic()

    def _accept(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        sock.setblocking(False)
        self._sel.register(sock, selectors.EVENT_READ, ("in", None))   # held open: our death shows
        self._heard[sock] = time.monotonic()

    def _beat(self) -> None:
        """Send every link its byte; report outgoing links silent for longer than `silence`."""
        now = time.monotonic()
        for key in list(self._sel.get_map().values()):
            kind, node = key.data
            if kind not in ("in", "out"):
                continue
            try:
                key.fileobj.send(b".")
            except (BlockingIOError, InterruptedError):
                pass                           # a frozen peer's buffer is full: its silence tells
            except OSError:
                pass                           # a broken link shows as EOF on the next read
            heard = self._heard.get(key.fileobj, now)
            if kind == "out" and now - heard > self.silence and now - self._quiet.get(key.fileobj, 0) > self.silence:
                self._quiet[key.fileobj] = now
                with self._lock:
                    held = self._out.get(node)
                if held is not None and held[0] is key.fileobj and self._on_silent is not None:
                    log.info("link to %s silent for %.1f s", node, now - heard)
                    self._on_silent(node, held[2])

    def _read(self, sock: socket.socket, node: str | None) -> None:
        try:
            if sock.recv(4096):
                self._heard[sock] = time.monotonic()
                self._quiet.pop(sock, None)
                return                         # heartbeats only
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno not in (errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT):
                log.info("link to %s: %s", node, exc)
        self._drop(sock)
        if node is None:
            return
        with self._lock:
            held = self._out.get(node)
            if held is None or held[0] is not sock:
                return                         # replaced or forgotten meanwhile
            del self._out[node]
        log.info("link to %s closed: its agent is gone", node)
        self._on_lost(node, held[2])
