"""Liveness leases and the watched rendezvous against a real etcd, with torch's real handlers in-process.

The keep-alive settings here are long on purpose (60 s x 3): anything that finishes within the test
timeout was driven by etcd's lease expiry and watch, not by torch's keep-alive polling.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

from chaosbench.rendezvous.etcd_v3 import create_backend, create_etcd_v3_handler
from chaosbench.rendezvous.liveness import Liveness
from chaosbench.rendezvous.watched import LivenessRendezvousHandler
from chaosbench.services.etcd_server import EtcdServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
SLOW_KEEP_ALIVE = {"keep_alive_interval": 60, "keep_alive_max_attempt": 3, "join_timeout": 60}


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    with EtcdServer(tmp_path_factory.mktemp("etcd") / "data") as server:
        yield server


def _params(endpoint, run_id, min_nodes=1, max_nodes=2, **conf):
    return RendezvousParameters("etcd-v3", endpoint, run_id, min_nodes, max_nodes, **{"ttl": 60, **conf})


def _liveness(etcd, run_id, node, ttl=2, links_host=None):
    backend, _ = create_backend(_params(etcd.endpoint, run_id))
    prefix = backend.key[: -len("state")]
    return Liveness(backend.connection, prefix, backend.key, node, ttl, links_host=links_host)


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


# A peer in its own process, so that SIGKILL closes its sockets the way a node loss does.
_PEER = """
import sys, time
from tests.rendezvous.test_liveness import _liveness
from types import SimpleNamespace
peer = _liveness(SimpleNamespace(endpoint=sys.argv[1]), sys.argv[2], "b", ttl=int(sys.argv[3]),
                 links_host="127.0.0.1").start()
print("up", flush=True)
time.sleep(600)
"""


def _peer(etcd, run_id, ttl=30):
    proc = subprocess.Popen([sys.executable, "-c", _PEER, etcd.endpoint, run_id, str(ttl)], stdout=subprocess.PIPE,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline() == b"up\n"
    return proc


def test_a_killed_peer_is_dead_at_once_from_its_closed_link_not_its_30s_lease(etcd):
    a = _liveness(etcd, "lk", "a", ttl=2, links_host="127.0.0.1").start()
    watcher = _liveness(etcd, "lk", "w").start()        # no links: learns from etcd's delete only
    proc = _peer(etcd, "lk")
    try:
        _wait(lambda: a.alive() == {"a", "b", "w"} and watcher.alive() == {"a", "b", "w"}, 5, "all to see b")
        _wait(lambda: "b" in a._links._out, 5, "a's link to b")
        t0 = time.monotonic()
        proc.kill()
        _wait(lambda: "b" in a.dead(), 5, "a to see b's link close")
        _wait(lambda: "b" in watcher.dead(), 5, "the revoke to reach a node without links")
        assert time.monotonic() - t0 < 2.0, "known from the lease (30 s), not from the link"
    finally:
        proc.kill()
        proc.wait()
        a.stop()
        watcher.stop()


def test_a_silent_link_alone_declares_nobody_dead(etcd):
    """Silence cannot tell a frozen peer from a partition between live ones: while etcd still hears
    from the peer (a 30-s lease refreshed every 7.5 s), nobody is declared dead; an address nobody
    listens at is no verdict either."""
    a = _liveness(etcd, "lf", "a", ttl=2, links_host="127.0.0.1").start()
    proc = _peer(etcd, "lf")
    try:
        _wait(lambda: "b" in a._links._out, 5, "a's link to b")
        proc.send_signal(signal.SIGSTOP)                 # link silent; its lease has 28-30 s left
        time.sleep(2.0)
        assert "b" not in a.dead() and "b" in a.alive()
        a._link("c", b'{"link": "127.0.0.1:1"}', 12345)
        time.sleep(0.5)
        assert "c" not in a.dead()
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()
        a.stop()


def test_a_frozen_peer_is_dead_once_its_link_and_its_lease_are_both_silent(etcd):
    """A 4-s lease is refreshed every second: once the link has been silent 1.2 s and etcd has missed
    a refresh, the peer is revoked, well before its lease would run out (4-5 s after the freeze)."""
    a = _liveness(etcd, "lz", "a", ttl=2, links_host="127.0.0.1").start()
    proc = _peer(etcd, "lz", ttl=4)
    try:
        _wait(lambda: "b" in a._links._out, 5, "a's link to b")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGSTOP)
        _wait(lambda: "b" in a.dead(), 6, "b to be declared dead")
        took = time.monotonic() - t0
        assert 1.2 <= took < 3.9, f"declared dead after {took:.1f}s: not by link silence + a missed refresh"
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()
        a.stop()


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


def test_a_dead_member_restarts_the_workers_even_after_a_sync_dropped_it_from_the_state(etcd):
    """torchrun restarts its workers when num_nodes_waiting() > 0. A frozen peer is dead to liveness;
    then a sync (the keep-alive thread's) sanitizes it out of the state's participants. Our workers
    still run with it in their world: the answer must stay > 0 (it once fell to 0, and two survivors
    waited in a collective with the frozen node until the run was stopped as stuck)."""
    a, b = (create_etcd_v3_handler(_params(etcd.endpoint, "sanitized", **SLOW_KEEP_ALIVE)) for _ in range(2))
    try:
        _rendezvous_all([a, b])
        assert a.num_nodes_waiting() == 0
        _freeze(b)
        _wait(lambda: a._liveness.dead(), 10, "b to be dead to a's liveness (lease expiry)")
        a._state_holder._last_sync_time = -1.0
        a._state_holder.sync()                      # what the keep-alive thread does every interval
        assert len(a._state_holder.state.participants) == 1, "the sanitizer should have dropped b"
        assert a.num_nodes_waiting() == 1
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
