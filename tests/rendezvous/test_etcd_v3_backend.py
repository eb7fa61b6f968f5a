"""The etcd-v3 backend and store against a real etcd: CAS, leases, restarts, clear errors, entry point."""
import datetime
import threading
import time

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

from chaosbench.rendezvous.etcd_v3 import create_backend
from chaosbench.rendezvous.handler import RoundStoreRendezvousHandler
from chaosbench.services.etcd_server import EtcdServer
from chaosbench.services.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    with EtcdServer(tmp_path_factory.mktemp("etcd") / "data") as server:
        yield server


def _params(endpoint, run_id="r", **conf):
    conf.setdefault("ttl", 60)
    return RendezvousParameters("etcd-v3", endpoint, run_id, 1, 2, **conf)


def test_compare_and_swap(etcd):
    backend, _ = create_backend(_params(etcd.endpoint, "cas"))
    assert backend.get_state() is None
    state, token, ok = backend.set_state(b"s1")
    assert (state, ok) == (b"s1", True)
    assert backend.set_state(b"other") == (b"s1", token, False)       # exists already: no overwrite
    state2, token2, ok = backend.set_state(b"s2", token)
    assert (state2, ok) == (b"s2", True) and token2 > token
    assert backend.set_state(b"lost", token) == (b"s2", token2, False)  # stale token loses
    assert backend.set_state(b"x", "not-a-token") == (b"s2", token2, False)
    assert backend.get_state() == (b"s2", token2)


def test_keys_carry_a_lease_and_a_lost_lease_is_replaced(etcd):
    backend, store = create_backend(_params(etcd.endpoint, "lease", ttl=30))
    backend.set_state(b"s")
    store.set("k", b"v")
    client = backend._conn.client
    _, meta = client.get(backend.key)
    assert meta.lease_id != 0
    ttl = client.get_lease_info(meta.lease_id).TTL
    assert 0 < ttl <= 30
    client.revoke_lease(meta.lease_id)                 # etcd forgets the lease (and its keys)
    assert backend.get_state() is None
    assert backend.set_state(b"again")[2] is True      # a fresh lease is taken transparently
    assert client.get(backend.key)[1].lease_id not in (0, meta.lease_id)


def test_store_operations(etcd):
    _, store = create_backend(_params(etcd.endpoint, "store", store_timeout=2))
    store.set("a", "1")
    assert store.get("a") == b"1"
    assert store.add("n", 3) == 3 and store.add("n", -1) == 2
    assert store.compare_set("c", "", "v1") == b"v1"          # empty expected: create
    assert store.compare_set("c", "wrong", "v2") == b"v1"
    assert store.compare_set("c", "v1", "v2") == b"v2"
    assert store.check(["a", "n"]) and not store.check(["a", "missing"])
    assert store.num_keys() == 3
    assert store.delete_key("a") and not store.check(["a"])
    threading.Timer(0.5, lambda: store.set("late", "x")).start()
    store.wait(["late"])                                      # blocks until published
    t = time.monotonic()
    with pytest.raises(LookupError):
        store.wait(["never"], datetime.timedelta(seconds=0.5))
    assert time.monotonic() - t < 2


def test_survives_an_etcd_restart(tmp_path):
    with EtcdServer(tmp_path / "etcd") as etcd:
        backend, _ = create_backend(_params(etcd.endpoint, "restart"))
        _, token, _ = backend.set_state(b"before")
        etcd.stop()
        threading.Timer(2.0, etcd.start).start()
        t = time.monotonic()
        assert backend.get_state() == (b"before", token)     # retried until etcd was back
        assert time.monotonic() - t >= 1.5
        assert backend.set_state(b"after", token)[2] is True


def test_unreachable_etcd_gives_a_clear_error_in_bounded_time():
    endpoint = f"127.0.0.1:{free_port()}"
    t = time.monotonic()
    with pytest.raises(RendezvousConnectionError, match=f"etcd at {endpoint} unreachable"):
        create_backend(_params(endpoint, connect_timeout=1))
    assert time.monotonic() - t < 10


def test_hung_etcd_gives_a_clear_error(tmp_path):
    with EtcdServer(tmp_path / "etcd") as etcd:
        backend, _ = create_backend(_params(etcd.endpoint, "hung", rpc_timeout=0.5, retry_timeout=1.5))
        etcd.pause()
        try:
            with pytest.raises(RendezvousConnectionError, match="unreachable"):
                backend.get_state()
        finally:
            etcd.resume()


@pytest.mark.parametrize("conf, message", [
    ({"ttl": "soon"}, "ttl='soon' is not a number"),
    ({"retry_timeout": "-1"}, "must not be negative"),
])
def test_bad_rdzv_conf(etcd, conf, message):
    with pytest.raises(ValueError, match=message):
        create_backend(_params(etcd.endpoint, **conf))


def test_bad_endpoint_and_run_id(etcd):
    with pytest.raises(ValueError, match="--rdzv-endpoint"):
        create_backend(RendezvousParameters("etcd-v3", "", "r", 1, 2))
    with pytest.raises(ValueError, match="run id"):
        create_backend(_params(etcd.endpoint, "a/b"))


def test_torch_finds_the_backend_through_the_entry_point(etcd):
    handler = get_rendezvous_handler(_params(etcd.endpoint, "ep"))
    assert isinstance(handler, RoundStoreRendezvousHandler)
    assert handler.get_backend() == "etcd-v3"
    handler._liveness.stop()   # its lease refresher would outlive the test
