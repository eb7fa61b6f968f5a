"""Liveness for the ``c10d-links`` rendezvous: torch's c10d rendezvous, told of crashes by peer links.

c10d keeps its state in a TCPStore: no leases, no watches. What it can have is the links of
links.py: each agent publishes its link address in the rendezvous store, connects to every node it
sees in the rendezvous state, and a link that reads EOF marks that node dead at once. Every survivor
holds its own link to the dead node, so each learns it by itself; nothing needs broadcasting.

A lost link is not the end of a node: a TCP reset on a live agent (Slurm's `disconnect` sends one,
a flapping NIC does too) breaks the link although the agent lives on. So a node marked dead that is
still (or again) in the rendezvous state is linked to anew, at most every ``relink_s``: a connect
that succeeds means its agent is listening, and the node is alive again and may rejoin. An agent
that really died has closed its port, and the connect is refused.

Without etcd there is no second witness for a silent link (links.py), so silence decides nothing
here: a frozen node is left to torch's keep-alive and the trainer's health check, as on stock c10d.
Having no watch, an agent waiting in a rendezvous re-reads the state every ``poll_s`` (0.1 s, one
small read from the store host) instead of torch's 1 s.
"""
from __future__ import annotations

import logging
import time

from chaosbench.rendezvous.links import Deaths, PeerLinks

log = logging.getLogger(__name__)
KEY = "chaosbench/links/"


class LinkLiveness(Deaths):
    poll_s = 0.1
    relink_s = 1.0    # how often a node marked dead is tried again while it is in the state

    def __init__(self, store, node: str, host: str):
        super().__init__()
        self._store = store
        self.node = node
        self._links = PeerLinks(host, self._on_lost, on_linked=self._on_linked)
        self._seen: set[str] = set()      # nodes in the last rendezvous state read, ours included
        self._asked: set[str] = set()     # nodes whose link address we have read (or gave up on)
        self._retry_at: dict[str, float] = {}   # dead node -> when to try linking to it again

    def alive(self) -> frozenset[str]:
        """Every node seen in the state and not lost: one whose link is not up yet counts as alive,
        so an early completion never leaves out a node that is still connecting."""
        with self._cond:
            return frozenset(self._seen - self._dead)

    def start(self) -> "LinkLiveness":
        self._links.start()
        self._store.set(KEY + self.node, self._links.address.encode())
        with self._cond:
            self._seen.add(self.node)
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._links.stop()

    def observe(self, state) -> None:
        """After each read of the rendezvous state: link to every node in it we have not met yet."""
        nodes = {repr(n) for n in (*state.participants, *state.wait_list, *state.redundancy_list)}
        now = time.monotonic()
        with self._cond:
            self._seen = nodes | {self.node}
            again = {n for n in nodes & self._dead if now >= self._retry_at.get(n, 0.0)}
            for n in again:
                self._retry_at[n] = now + self.relink_s
        new = (nodes - self._asked - self._dead - {self.node}) | again   # the dead: every relink_s
        for node in new:
            try:
                if not self._store.check([KEY + node]):
                    continue              # not published yet: asked again at the next read
                address = self._store.get(KEY + node).decode()
            except Exception as exc:      # the store host is busy or gone: torch's keep-alive decides
                log.info("links: cannot read the link address of %s (%s)", node, exc)
                continue
            self._asked.add(node)
            self._links.link(node, address, None)

    def _on_lost(self, node: str, _token) -> None:
        log.info("liveness: %s is dead (its link closed: its agent is gone)", node)
        with self._cond:
            self._dead.add(node)
            self._asked.discard(node)    # a comeback re-reads its address and links anew
            self._retry_at[node] = time.monotonic() + self.relink_s
            self._changed()

    def _on_linked(self, node: str, _token) -> None:
        """A connect succeeded: its agent listens, so a node we had marked dead is back."""
        with self._cond:
            if node in self._dead:
                log.info("liveness: %s is back (a link to its agent is up again)", node)
                self._dead.discard(node)
                self._retry_at.pop(node, None)
                self._changed()
