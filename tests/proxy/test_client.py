"""Our typed ProxyClient against our server: every call, and errors carrying status + message."""
from __future__ import annotations

import socket

import pytest

from chaosbench.proxy import ProxyAPIError, ProxyClient

from .conftest import connect, roundtrip

pytestmark = pytest.mark.timeout(30)


def test_full_lifecycle(client, echo):
    assert client.version().startswith("2.")
    p = client.create_proxy("echo", echo.addr)
    assert p.enabled and p.port > 0 and client.get("echo") == p
    assert set(client.proxies()) == {"echo"}
    t = client.add_toxic("echo", "latency", {"latency": 100}, name="lat", stream="upstream")
    assert (t.name, t.type, t.stream, t.toxicity) == ("lat", "latency", "upstream", 1.0)
    assert client.toxics("echo") == [t] and client.get_toxic("echo", "lat") == t
    with connect(p.port) as s:
        assert roundtrip(s)[1] >= 0.1
    t2 = client.update_toxic("echo", "lat", {"jitter": 10}, toxicity=0.5)
    assert t2.attributes == {"latency": 100, "jitter": 10} and t2.toxicity == 0.5
    client.remove_toxic("echo", "lat")
    assert client.get("echo").toxics == []
    assert client.disable("echo").enabled is False
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", p.port), timeout=2)
    assert client.enable("echo").enabled is True
    moved = client.update("echo", upstream="127.0.0.1:9")
    assert moved.upstream == "127.0.0.1:9" and moved.listen == p.listen
    client.delete("echo")
    assert client.proxies() == {}


def test_populate_and_reset(client, echo):
    made = client.populate([{"name": "a", "upstream": echo.addr},
                            {"name": "b", "upstream": echo.addr, "enabled": False}])
    assert [(p.name, p.enabled) for p in made] == [("a", True), ("b", False)]
    client.add_toxic("a", "timeout")
    client.reset()
    assert all(p.enabled and not p.toxics for p in client.proxies().values())


@pytest.mark.parametrize("call,status,needle", [
    (lambda c: c.get("nope"), 404, "proxy not found"),
    (lambda c: c.delete("nope"), 404, "proxy not found"),
    (lambda c: c.remove_toxic("echo", "nope"), 404, "toxic not found"),
    (lambda c: c.create_proxy("echo", "127.0.0.1:1"), 409, "proxy already exists"),
    (lambda c: c.add_toxic("echo", "nosuch"), 400, "invalid toxic type"),
    (lambda c: c.add_toxic("echo", "bandwidth", {"rate": -5}), 400, "rate must be >= 0"),
])
def test_errors_carry_status_and_message(client, echo, call, status, needle):
    client.create_proxy("echo", echo.addr)
    with pytest.raises(ProxyAPIError) as err:
        call(client)
    assert err.value.status == status and needle in err.value.message
    assert str(status) in str(err.value) and needle in str(err.value)


def test_unreachable_server_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = ProxyClient(f"http://127.0.0.1:{port}", timeout=2)
    with pytest.raises(ProxyAPIError) as err:
        c.version()
    assert err.value.status == 0 and "cannot reach the proxy API" in str(err.value)


def test_embedded_server_hands_out_a_client(server, echo):
    c = server.client(timeout=2)
    assert c.create_proxy("e", echo.addr).enabled and c.base_url == server.url
    c.close()


def test_embedded_server_stop_closes_proxies_and_connections(echo):
    from chaosbench.proxy import ProxyServer
    from .conftest import connect, roundtrip
    with ProxyServer("127.0.0.1", 0) as srv:
        p = srv.client().create_proxy("e", echo.addr)
        live = connect(p.port)
        assert roundtrip(live)[0] == b"ping"
    live.settimeout(2)
    try:
        assert live.recv(10) == b""
    except ConnectionResetError:
        pass
    live.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", p.port), timeout=1)
    with pytest.raises(ProxyAPIError):
        ProxyClient(srv.url, timeout=1).version()
