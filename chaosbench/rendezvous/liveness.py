"""Who is alive in an etcd-v3 rendezvous, learned from etcd leases and one watch instead of polling.

Each agent holds a short lease (rdzv-conf ``liveness_ttl``, default 2 s) carrying one key,
``{run}/alive/{node}``, refreshed four times per TTL. A node that dies, freezes or loses etcd stops
refreshing; etcd deletes its key when the lease runs out and every other agent sees the delete at
once through its watch on the run's keys. The same watch reports each write of the rendezvous state,
so an agent waiting for the state to change is woken when it changes.

Only a delete marks a node dead. A key that is merely missing (a broken watch, a wiped etcd) marks
nobody; then the rendezvous falls back to torch's own keep-alive expiry, as without liveness. A
delete also marks nobody while our own lease is in doubt (no refresh for half a TTL, or our key
deleted in the same batch): a link to etcd that was cut expires everyone's lease, not only the dead.

With peer links (links.py) a death is known before the lease runs out: the agent that sees its
connection to a peer close revokes that peer's lease, and everyone's watch sees the same delete. A
link gone silent revokes it only when etcd agrees (the peer stopped refreshing its lease too).
"""
from __future__ import annotations

import json
import logging
import threading
import time

from chaosbench.rendezvous.connection import EtcdV3Connection
from chaosbench.rendezvous.links import Deaths, PeerLinks

log = logging.getLogger(__name__)


class Liveness(Deaths):
    """poll_s stays 1 s: the watch wakes a waiting rendezvous sooner."""

    def __init__(self, conn: EtcdV3Connection, run_prefix: str, state_key: str, node: str, ttl: int,
                 links_host: str | None = None):
        if ttl < 1:
            raise ValueError(f"--rdzv-conf liveness_ttl={ttl}: give whole seconds >= 1 (or 0 to turn it off)")
        super().__init__()   # the version moves on every change of the state key or of who is alive
        self._conn = conn
        self._client = conn.client
        self._run_prefix = run_prefix
        self._alive_prefix = run_prefix + "alive/"
        self._state_key = state_key
        self.node = node
        self.ttl = ttl
        self._lease_id: int | None = None
        self._refreshed_at = 0.0     # monotonic time of our last refresh that etcd answered
        self._alive: set[str] = set()
        self._watch_id = None
        self._watch_ok = False
        self._thread = threading.Thread(target=self._keep, name=f"rdzv-liveness-{node}", daemon=True)
        self._links = PeerLinks(links_host, self._on_link_lost, self._on_link_silent) if links_host else None

    # -- what the rendezvous asks (besides Deaths') --------------------------------------------
    def alive(self) -> frozenset[str] | None:
        """The nodes with a live key, or None while the watch is broken (then we know nothing)."""
        with self._cond:
            return frozenset(self._alive) if self._watch_ok else None

    def observe(self, state) -> None:
        """Links come from the liveness keys here, not from the rendezvous state."""

    # -- life cycle --------------------------------------------------------------------------
    def start(self) -> "Liveness":
        """Publish our key and watch the others' before the first rendezvous write, so whoever sees
        our join in the state has seen our key first (one watch delivers in revision order)."""
        if self._links is not None:
            self._links.start()
        self._conn.call("publishing this node's liveness key", self._publish)
        self._conn.call("watching the rendezvous keys", self._resync)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Leave: revoke the lease, so the others learn at once that we are gone."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._links is not None:
            self._links.stop()
        if self._watch_id is not None:
            try:
                self._client.cancel_watch(self._watch_id)
            except Exception:  # leaving must not fail on a gone etcd
                pass
        if self._lease_id is not None:
            try:
                self._client.revoke_lease(self._lease_id)
            except Exception:
                pass

    # -- our own key -------------------------------------------------------------------------
    def _publish(self) -> None:
        lease = self._client.lease(self.ttl)
        if lease.ttl != self.ttl:   # etcd raises TTLs below its minimum (2 s with default settings)
            log.info("etcd granted a %s s liveness lease (asked for %s s)", lease.ttl, self.ttl)
        value = json.dumps({"node": self.node, "link": self._links.address if self._links else None})
        self._client.put(self._alive_prefix + self.node, value.encode(), lease=lease.id)
        self._lease_id = lease.id
        self._refreshed_at = time.monotonic()

    def _refresh(self) -> None:
        if self._lease_id is None:
            self._publish()
            return
        responses = list(self._client.refresh_lease(self._lease_id))
        if not responses or responses[-1].TTL <= 0:
            # Our lease ran out (we were frozen, or cut from etcd, longer than the TTL): the others
            # may have dropped us; a fresh key tells them we are back.
            log.warning("liveness lease of %s expired; publishing again", self.node)
            self._lease_id = None
            self._publish()
            return
        self._refreshed_at = time.monotonic()

    def _keep(self) -> None:
        interval = self.ttl / 4
        failing = False
        while not self._stop.wait(interval):
            try:
                self._refresh()
                if not self._watch_ok:
                    self._resync()
                failing = False
            except Exception as exc:  # etcd down or restarting: keep trying, say so once
                if not failing:
                    log.warning("liveness of %s: etcd at %s failed (%s); retrying", self.node,
                                self._conn.endpoint, exc)
                failing = True
                if self._conn.is_lease_not_found(exc):
                    self._lease_id = None

    # -- everybody's keys --------------------------------------------------------------------
    def _resync(self) -> None:
        """Read who is alive now and watch for changes from exactly that revision on."""
        response = self._client.get_prefix_response(self._alive_prefix)
        alive = {kv.key.decode()[len(self._alive_prefix):] for kv in response.kvs}
        for kv in response.kvs:
            self._link(kv.key.decode()[len(self._alive_prefix):], kv.value, kv.lease)
        with self._cond:
            self._alive = alive
            self._dead -= alive
            self._watch_ok = True
            self._changed()
        self._watch_id = self._client.add_watch_prefix_callback(
            self._run_prefix, self._on_watch, start_revision=response.header.revision + 1)

    def _on_watch(self, response) -> None:
        events = getattr(response, "events", None)
        with self._cond:
            if events is None:           # an error: the watch is gone; _keep re-reads and re-watches
                log.warning("liveness watch of %s broke (%s); re-reading", self.node, response)
                self._watch_ok = False
                self._changed()
                return
            keys = [(e.key.decode(), isinstance(e, self._conn.etcd3.events.DeleteEvent), e) for e in events]
            nodes = [(k[len(self._alive_prefix):], gone, e) for k, gone, e in keys if k.startswith(self._alive_prefix)]
            trusted = (all(n != self.node or not gone for n, gone, _ in nodes)
                       and time.monotonic() - self._refreshed_at <= self.ttl / 2)
            for node, gone, event in nodes:
                if gone:
                    self._alive.discard(node)
                    if node != self.node and trusted:
                        self._dead.add(node)
                    if self._links is not None:
                        self._links.forget(node)
                else:
                    self._alive.add(node)
                    self._dead.discard(node)
                    self._link(node, event.value, event.lease)
            if nodes or any(k == self._state_key for k, _, _ in keys):
                self._changed()

    # -- peer links: a crash known from its closed connection -------------------------------------
    def _link(self, node: str, value: bytes, lease: int) -> None:
        if self._links is None or node == self.node:
            return
        try:
            address = json.loads(value).get("link")
        except (ValueError, AttributeError):
            address = None        # an agent without links (older, or links off): lease only
        if address:
            self._links.link(node, address, lease)

    def _on_link_lost(self, node: str, lease: int, why: str = "its link closed") -> None:
        with self._cond:
            if time.monotonic() - self._refreshed_at > self.ttl / 2 or node not in self._alive:
                return            # our own standing is in doubt, or the node already left
            self._alive.discard(node)
            self._dead.add(node)
            self._changed()
        log.info("liveness: %s is dead (%s); revoking its lease so every agent knows now", node, why)
        try:
            self._client.revoke_lease(lease)
        except Exception as exc:   # already expired or revoked: the others learn from etcd anyway
            log.info("revoking the lease of %s: %s", node, exc)

    def _on_link_silent(self, node: str, lease: int) -> None:
        threading.Thread(target=self._check_silent, args=(node, lease), daemon=True,
                         name=f"rdzv-silent-{node}").start()

    def _check_silent(self, node: str, lease: int) -> None:
        """A silent link is a frozen peer only if etcd has not heard from it either: a lease refreshed
        every granted/4 seconds never has less than granted - granted/4 left, and etcd truncates the
        remaining seconds, so less than granted - granted/4 - 1 means a missed refresh."""
        try:
            info = self._client.get_lease_info(lease)
        except Exception as exc:
            log.info("liveness: cannot ask etcd about %s's lease (%s); waiting for it to expire", node, exc)
            return
        if info.TTL < 0:
            return                # already expired: the watch brings the delete
        if info.TTL >= info.grantedTTL * 0.75 - 1:
            log.info("liveness: %s's link is silent but it refreshes its lease: a partition between us, "
                     "not a frozen node; left to the health check", node)
            return
        self._on_link_lost(node, lease, f"silent on its link and to etcd: {info.TTL} s of its "
                                        f"{info.grantedTTL}-s lease left")
