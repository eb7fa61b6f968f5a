"""Liveness leases and the watched rendezvous against a real etcd, with torch's real handlers in-process.

The keep-alive settings here are long on purpose (60 s x 3): anything that finishes within the test
timeout was driven by etcd's lease expiry and watch, not by torch's keep-alive polling.
"""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

from chaosbench.rendezvous.etcd_v3 import create_backend, create_etcd_v3_handler
from chaosbench.rendezvous.liveness import Liveness
from chaosbench.rendezvous.watched import LivenessRendezvousHandler
from chaosbench.services.etcd_server import EtcdServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

SLOW_KEEP_ALIVE = {"keep_alive_interval": 60, "keep_alive_max_attempt": 3, "join_timeout": 60}


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    with EtcdServer(tmp_path_factory.mktemp("etcd") / "data") as server:
        yield server


def _params(endpoint, run_id, min_nodes=1, max_nodes=2, **conf):
    return RendezvousParameters("etcd-v3", endpoint, run_id, min_nodes, max_nodes, **{"ttl": 60, **conf})


def _liveness(etcd, run_id, node, ttl=2):
    backend, _ = create_backend(_params(etcd.endpoint, run_id))
    prefix = backend.key[: -len("state")]
    return Liveness(backend.connection, prefix, backend.key, node, ttl)


def _wait(predicate, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _freeze(handler: LivenessRendezvousHandler) -> None:
    """What SIGKILL leaves behind: no more torch heartbeats, no more lease refreshes, no revoke."""
    handler._stop_heartbeats()
    handler._liveness._stop.set()


def _rendezvous_all(handlers):
    out, errors = {}, []

    def one(h):
        try:
            out[h] = h.next_rendezvous()
        except Exception as exc:  # surfaced below with the handler that raised
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(h,)) for h in handlers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return [out[h] for h in handlers]


def test_leave_and_lease_expiry_mark_dead_and_a_comeback_revives(etcd):
    a = _liveness(etcd, "lv", "a").start()
    b = _liveness(etcd, "lv", "b").start()
    try:
        _wait(lambda: a.alive() == {"a", "b"}, 5, "a to see b")
        b.stop()                                    # graceful: the lease is revoked
        _wait(lambda: "b" in a.dead(), 5, "b's revoke")
        assert a.alive() == {"a"}

        c = _liveness(etcd, "lv", "c").start()
        _wait(lambda: "c" in a.alive(), 5, "a to see c")
        c._stop.set()                               # frozen: no refresh, no revoke
        t0 = time.monotonic()
        _wait(lambda: "c" in a.dead(), 10, "c's lease to expire")
        assert time.monotonic() - t0 >= 1.0         # not before the lease ran out

        c._publish()                                # a frozen node that comes back publishes again
        _wait(lambda: "c" not in a.dead() and "c" in a.alive(), 5, "c to come back")
        assert "a" not in a.dead()                  # never dead to itself
    finally:
        a.stop()


def test_a_broken_watch_is_reported_and_rebuilt(etcd):
    a = _liveness(etcd, "lvw", "a").start()
    try:
        _wait(lambda: a.alive() == {"a"}, 5, "a's own key")
        a._on_watch(RuntimeError("stream reset"))   # what etcd3 hands the callback when the stream dies
        assert a.alive() is None                    # nothing is trusted while it is broken
        _wait(lambda: a.alive() == {"a"}, 5, "the watch to be rebuilt")
        b = _liveness(etcd, "lvw", "b").start()
        _wait(lambda: a.alive() == {"a", "b"}, 5, "events on the rebuilt watch")
        b.stop()
    finally:
        a.stop()


def test_deletes_are_not_trusted_while_our_own_lease_is_in_doubt(etcd):
    """A cut link to etcd expires every lease, the live nodes' too: those deletes must not kill anyone."""
    a = _liveness(etcd, "lvd", "a").start()
    a._stop.set()                                   # no background refresh: we set its age below
    delete_cls = a._conn.etcd3.events.DeleteEvent

    def deletes(*nodes):
        out = []
        for node in nodes:
            event = delete_cls.__new__(delete_cls)
            event.key = (a._alive_prefix + node).encode()
            out.append(event)
        return SimpleNamespace(events=out)

    a._refreshed_at = time.monotonic()
    a._on_watch(deletes("a", "b"))                  # our own key went in the same batch
    assert "b" not in a.dead()
    a._refreshed_at = time.monotonic() - a.ttl     # no refresh for a whole TTL
    a._on_watch(deletes("c"))
    assert "c" not in a.dead()
    a._refreshed_at = time.monotonic()
    a._on_watch(deletes("d"))                       # a healthy lease: the delete is a death
    assert a.dead() == {"d"}
    a.stop()


def test_entry_point_builds_the_watched_handler_and_liveness_ttl_0_turns_it_off(etcd):
    handler = get_rendezvous_handler(_params(etcd.endpoint, "ep"))
    assert isinstance(handler, LivenessRendezvousHandler)
    handler._liveness.stop()
    plain = create_etcd_v3_handler(_params(etcd.endpoint, "ep0", liveness_ttl=0))
    assert not isinstance(plain, LivenessRendezvousHandler)
    with pytest.raises(ValueError, match="liveness_ttl"):
        create_etcd_v3_handler(_params(etcd.endpoint, "ep1", liveness_ttl=0.5))


def test_dead_node_leaves_the_rendezvous_when_its_lease_expires(etcd):
    """A survivor re-rendezvouses without the killed node long before torch's 180-s keep-alive expiry."""
    conf = {**SLOW_KEEP_ALIVE, "last_call_timeout": 1}
    a, b = (create_etcd_v3_handler(_params(etcd.endpoint, "loss", **conf)) for _ in range(2))
    try:
        first = _rendezvous_all([a, b])
        assert sorted(i.rank for i in first) == [0, 1] and {i.world_size for i in first} == {2}
        _freeze(b)
        t0 = time.monotonic()
        info = a.next_rendezvous()
        took = time.monotonic() - t0
        assert (info.rank, info.world_size) == (0, 1)
        assert took < 20, f"re-rendezvous took {took:.1f}s: the dead node was not dropped by its lease"
    finally:
        for h in (a, b):
            h._liveness.stop()


def test_rejoin_completes_when_all_live_nodes_joined_but_a_first_round_keeps_its_last_call(etcd):
    conf = {**SLOW_KEEP_ALIVE, "last_call_timeout": 4}
    a, b = (create_etcd_v3_handler(_params(etcd.endpoint, "early", max_nodes=3, **conf)) for _ in range(2))
    try:
        t0 = time.monotonic()
        _rendezvous_all([a, b])                 # first round: nobody knows who else may start
        assert time.monotonic() - t0 >= 4       # the whole last call (min 1, max 3, 2 joined)
        t0 = time.monotonic()
        infos = _rendezvous_all([a, b])         # a restart: both live nodes are in, no need to wait
        assert time.monotonic() - t0 < 4
        assert {i.world_size for i in infos} == {2}
    finally:
        for h in (a, b):
            h.shutdown()
