"""Liveness for the ``c10d-links`` rendezvous: torch's c10d rendezvous, told of crashes by peer links.

c10d keeps its state in a TCPStore: no leases, no watches. What it can have is the links of
links.py: each agent publishes its link address in the rendezvous store, connects to every node it
sees in the rendezvous state, and a link that reads EOF marks that node dead at once. Every survivor
holds its own link to the dead node, so each learns it by itself; nothing needs broadcasting.

Without etcd there is no second witness for a silent link (links.py), so silence decides nothing
here: a frozen node is left to torch's keep-alive and the trainer's health check, as on stock c10d.
Having no watch, an agent waiting in a rendezvous re-reads the state every ``poll_s`` (0.1 s, one
small read from the store host) instead of torch's 1 s.
"""
from __future__ import annotations

import logging

from chaosbench.rendezvous.links import Deaths, PeerLinks

log = logging.getLogger(__name__)
KEY = "chaosbench/links/"


class LinkLiveness(Deaths):
    poll_s = 0.1

    def __init__(self, store, node: str, host: str):
        super().__init__()
        self._store = store
        self.node = node
        self._links = PeerLinks(host, self._on_lost)
        self._seen: set[str] = set()      # nodes in the last rendezvous state read, ours included
        self._asked: set[str] = set()     # nodes whose link address we have read (or gave up on)

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
        new = nodes - self._asked - {self.node}
        with self._cond:
            self._seen = nodes | {self.node}
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
            self._changed()
