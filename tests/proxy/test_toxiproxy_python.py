"""The `toxiproxy-python` 0.1.1 client (what users know) against our server.

That client keeps host/port as class attributes of APIConsumer (process-wide globals), so each
test points it at its own server and restores the old values afterwards.
"""
from __future__ import annotations

import socket

import pytest

toxiproxy = pytest.importorskip("toxiproxy")
from toxiproxy.api import APIConsumer  # noqa: E402
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists  # noqa: E402

from .conftest import connect, roundtrip  # noqa: E402

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def tp(server):
    old = APIConsumer.host, APIConsumer.port
    t = toxiproxy.Toxiproxy()
    t.update_api_consumer("127.0.0.1", server.port)
    yield t
    APIConsumer.host, APIConsumer.port = old


def port_of(proxy) -> int:
    return int(proxy.listen.rsplit(":", 1)[1])


def test_running_and_version(tp):
    assert tp.running() is True
    assert b"2." in tp.version()


def test_create_list_get_destroy(tp, echo):
    p = tp.create(upstream=echo.addr, name="echo")
    assert p.name == "echo" and p.enabled is True and p.upstream == echo.addr
    with connect(port_of(p)) as s:
        assert roundtrip(s)[0] == b"ping"
    assert set(tp.proxies()) == {"echo"}
    assert tp.get_proxy("echo").listen == p.listen
    assert tp.get_proxy("nope") is None
    with pytest.raises(ProxyExists):
        tp.create(upstream=echo.addr, name="echo")
    assert tp.destroy(p) is True
    assert tp.proxies() == {}
    with pytest.raises(NotFound):
        p.destroy()


def test_toxics_add_list_destroy(tp, echo):
    p = tp.create(upstream=echo.addr, name="echo")
    p.add_toxic(type="latency", attributes={"latency": 200})
    toxics = p.toxics()
    assert set(toxics) == {"latency_downstream"}
    assert toxics["latency_downstream"].attributes == {"latency": 200, "jitter": 0}
    with connect(port_of(p)) as s:
        assert roundtrip(s)[1] >= 0.2
    assert p.get_toxic("latency_downstream").stream == "downstream"
    assert p.destroy_toxic("latency_downstream") is True
    assert p.toxics() == {}


def test_invalid_toxic_raises(tp, echo):
    p = tp.create(upstream=echo.addr, name="echo")
    with pytest.raises(InvalidToxic):
        p.add_toxic(type="nosuch")
    with pytest.raises(InvalidToxic):
        p.add_toxic(type="bandwidth", attributes={"rate": -1})


def test_down_context_refuses_then_restores(tp, echo):
    p = tp.create(upstream=echo.addr, name="echo")
    with p.down():
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port_of(p)), timeout=2)
    with connect(port_of(p)) as s:
        assert roundtrip(s)[0] == b"ping"


def test_populate_reset_destroy_all(tp, echo):
    made = tp.populate([{"name": "a", "upstream": echo.addr, "listen": "127.0.0.1:0"},
                        {"name": "b", "upstream": echo.addr, "listen": "127.0.0.1:0"}])
    assert sorted(p.name for p in made) == ["a", "b"]
    made[0].add_toxic(type="timeout", attributes={"timeout": 0})
    made[1].disable()
    assert tp.reset() is True
    proxies = tp.proxies()
    assert all(p.enabled for p in proxies.values()) and proxies["a"].toxics() == {}
    tp.destroy_all()
    assert tp.proxies() == {}
