"""Every API route over raw HTTP: Toxiproxy 2.x JSON shapes and status codes, bad input."""
from __future__ import annotations

import socket

import pytest
import requests

from .conftest import connect, roundtrip

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def api(server):
    base = server.url

    def call(method, path, body=None, raw=None, headers=None):
        return requests.request(method, base + path, json=body, data=raw, headers=headers,
                                timeout=5)
    return call


def make(api, echo, name="echo", **extra):
    r = api("POST", "/proxies", {"name": name, "upstream": echo.addr, "listen": "127.0.0.1:0", **extra})
    assert r.status_code == 201, r.text
    return r.json()


def error_of(r, status):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["status"] == status and body["error"]
    return body["error"]


def test_version(api):
    r = api("GET", "/version")
    assert r.status_code == 200 and r.json()["version"].startswith("2.")


def test_proxy_create_shape_and_listen_port(api, echo):
    p = make(api, echo)
    assert set(p) == {"name", "listen", "upstream", "enabled", "toxics"}
    assert p["name"] == "echo" and p["upstream"] == echo.addr and p["enabled"] is True
    assert p["toxics"] == [] and not p["listen"].endswith(":0")
    with connect(int(p["listen"].rsplit(":", 1)[1])) as s:
        assert roundtrip(s)[0] == b"ping"


def test_proxy_create_disabled_does_not_listen(api, echo):
    p = make(api, echo, enabled=False)
    assert p["enabled"] is False


def test_proxy_index_and_show(api, echo):
    make(api, echo, "a")
    make(api, echo, "b")
    r = api("GET", "/proxies")
    assert r.status_code == 200 and set(r.json()) == {"a", "b"}
    assert r.json()["a"]["name"] == "a"
    assert api("GET", "/proxies/b").json()["name"] == "b"
    assert error_of(api("GET", "/proxies/nope"), 404) == "proxy not found"


def test_proxy_duplicate_is_409(api, echo):
    make(api, echo)
    r = api("POST", "/proxies", {"name": "echo", "upstream": echo.addr})
    assert error_of(r, 409) == "proxy already exists"


@pytest.mark.parametrize("body,needle", [
    ({"upstream": "127.0.0.1:1"}, "missing required field: name"),
    ({"name": "x"}, "missing required field: upstream"),
    ({"name": "x", "upstream": "nohostport"}, "upstream"),
    ({"name": "x", "upstream": "127.0.0.1:1", "listen": "127.0.0.1:99999"}, "listen"),
    ({"name": "x", "upstream": "127.0.0.1:1", "enabled": "yes"}, "enabled"),
])
def test_proxy_create_bad_input_is_400(api, body, needle):
    assert needle in error_of(api("POST", "/proxies", body), 400)
    assert api("GET", "/proxies").json() == {}


def test_malformed_json_is_400(api, echo):
    make(api, echo)
    assert "malformed JSON" in error_of(api("POST", "/proxies", raw=b"{not json"), 400)
    assert "malformed JSON" in error_of(api("POST", "/proxies/echo/toxics", raw=b"[1,"), 400)
    assert "malformed JSON" in error_of(api("POST", "/populate", raw=b"nope"), 400)
    assert "expected a JSON object" in error_of(api("POST", "/proxies", raw=b"[]"), 400)


def test_listen_in_use_is_500_with_message(api, echo):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        port = busy.getsockname()[1]
        r = api("POST", "/proxies", {"name": "x", "upstream": echo.addr, "listen": f"127.0.0.1:{port}"})
        assert "in use" in error_of(r, 500)
    finally:
        busy.close()


def test_partial_update_disable_then_enable(api, echo):
    p = make(api, echo)
    port = int(p["listen"].rsplit(":", 1)[1])
    s = connect(port)
    assert roundtrip(s)[0] == b"ping"
    r = api("POST", "/proxies/echo", {"enabled": False})
    assert r.status_code == 200
    body = r.json()
    assert body["enabled"] is False and body["listen"] == p["listen"] and body["upstream"] == echo.addr
    # the existing connection is dropped ...
    s.settimeout(2)
    try:
        assert s.recv(10) == b""
    except ConnectionResetError:
        pass
    s.close()
    # ... and new ones are refused
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    r = api("PATCH", "/proxies/echo", {"enabled": True})
    assert r.status_code == 200 and r.json()["enabled"] is True
    with connect(port) as s2:
        assert roundtrip(s2)[0] == b"ping"


def test_update_upstream_moves_the_proxy(api, echo, upstreams):
    other = upstreams("greet", b"other")
    p = make(api, echo)
    r = api("POST", "/proxies/echo", {"upstream": other.addr})
    assert r.status_code == 200 and r.json()["upstream"] == other.addr
    with connect(int(p["listen"].rsplit(":", 1)[1])) as s:
        assert s.recv(10) == b"other"


def test_update_bad_input(api, echo):
    make(api, echo)
    assert "enabled" in error_of(api("POST", "/proxies/echo", {"enabled": 3}), 400)
    assert "upstream" in error_of(api("POST", "/proxies/echo", {"upstream": "x"}), 400)
    error_of(api("POST", "/proxies/nope", {"enabled": False}), 404)


def test_delete_drops_connections(api, echo):
    p = make(api, echo)
    s = connect(int(p["listen"].rsplit(":", 1)[1]))
    r = api("DELETE", "/proxies/echo")
    assert r.status_code == 204 and r.content == b""
    s.settimeout(2)
    try:
        assert s.recv(10) == b""
    except ConnectionResetError:
        pass
    s.close()
    error_of(api("DELETE", "/proxies/echo"), 404)
    assert api("GET", "/proxies").json() == {}


def test_toxic_routes(api, echo):
    make(api, echo)
    r = api("POST", "/proxies/echo/toxics", {"type": "latency", "attributes": {"latency": 10}})
    assert r.status_code == 200
    assert r.json() == {"name": "latency_downstream", "type": "latency", "stream": "downstream",
                        "toxicity": 1.0, "attributes": {"latency": 10, "jitter": 0}}
    r = api("POST", "/proxies/echo/toxics", {"name": "bw", "type": "bandwidth", "stream": "upstream",
                                             "toxicity": 0.5, "attributes": {"rate": 100}})
    assert r.status_code == 200 and r.json()["stream"] == "upstream"
    assert [t["name"] for t in api("GET", "/proxies/echo/toxics").json()] == ["latency_downstream", "bw"]
    assert [t["name"] for t in api("GET", "/proxies/echo").json()["toxics"]] == ["latency_downstream", "bw"]
    assert api("GET", "/proxies/echo/toxics/bw").json()["attributes"] == {"rate": 100}
    # partial update: attributes merge, toxicity kept unless given
    r = api("POST", "/proxies/echo/toxics/latency_downstream", {"attributes": {"jitter": 5}})
    assert r.status_code == 200 and r.json()["attributes"] == {"latency": 10, "jitter": 5}
    r = api("PATCH", "/proxies/echo/toxics/bw", {"toxicity": 0.25})
    assert r.json()["toxicity"] == 0.25 and r.json()["attributes"] == {"rate": 100}
    assert api("DELETE", "/proxies/echo/toxics/bw").status_code == 204
    assert error_of(api("GET", "/proxies/echo/toxics/bw"), 404) == "toxic not found"
    error_of(api("DELETE", "/proxies/echo/toxics/bw"), 404)
    error_of(api("POST", "/proxies/echo/toxics/bw", {"toxicity": 1}), 404)
    error_of(api("GET", "/proxies/nope/toxics"), 404)
    error_of(api("POST", "/proxies/nope/toxics", {"type": "latency"}), 404)


def test_every_toxic_type_is_accepted(api, echo):
    make(api, echo)
    for t in ("latency", "bandwidth", "slow_close", "timeout", "reset_peer", "slicer", "limit_data"):
        attrs = {"average_size": 10} if t == "slicer" else {}
        r = api("POST", "/proxies/echo/toxics", {"type": t, "attributes": attrs})
        assert r.status_code == 200, (t, r.text)
        assert r.json()["name"] == f"{t}_downstream"


def test_toxic_duplicate_is_409(api, echo):
    make(api, echo)
    api("POST", "/proxies/echo/toxics", {"type": "latency", "name": "x"})
    assert error_of(api("POST", "/proxies/echo/toxics", {"type": "timeout", "name": "x"}),
                    409) == "toxic already exists"


@pytest.mark.parametrize("body,needle", [
    ({"type": "nosuch"}, "invalid toxic type"),
    ({}, "invalid toxic type"),
    ({"type": "bandwidth", "attributes": {"rate": -1}}, "attributes.rate must be >= 0"),
    ({"type": "latency", "attributes": {"latency": -5}}, "attributes.latency must be >= 0"),
    ({"type": "latency", "attributes": {"latency": "slow"}}, "must be an integer"),
    ({"type": "latency", "attributes": {"latncy": 5}}, "unknown attribute 'latncy'"),
    ({"type": "latency", "stream": "sideways"}, "stream was invalid"),
    ({"type": "latency", "toxicity": 1.5}, "toxicity must be a number between 0 and 1"),
    ({"type": "slicer", "attributes": {"average_size": 10, "size_variation": 10}}, "size_variation"),
    ({"type": "latency", "attributes": [1]}, "attributes must be a JSON object"),
])
def test_toxic_bad_input_is_400(api, echo, body, needle):
    make(api, echo)
    assert needle in error_of(api("POST", "/proxies/echo/toxics", body), 400)
    assert api("GET", "/proxies/echo/toxics").json() == []


def test_toxic_update_bad_input_keeps_old_toxic(api, echo):
    make(api, echo)
    api("POST", "/proxies/echo/toxics", {"type": "bandwidth", "attributes": {"rate": 10}})
    assert "rate" in error_of(api("POST", "/proxies/echo/toxics/bandwidth_downstream",
                                  {"attributes": {"rate": -10}}), 400)
    assert api("GET", "/proxies/echo/toxics/bandwidth_downstream").json()["attributes"] == {"rate": 10}


def test_populate_creates_replaces_and_keeps(api, echo, upstreams):
    other = upstreams("echo")
    r = api("POST", "/populate", [{"name": "a", "upstream": echo.addr},
                                  {"name": "b", "upstream": echo.addr, "enabled": False}])
    assert r.status_code == 201
    proxies = r.json()["proxies"]
    assert [p["name"] for p in proxies] == ["a", "b"] and proxies[1]["enabled"] is False
    listen_a = proxies[0]["listen"]
    # same name + same addresses: kept as is; different upstream: replaced
    r = api("POST", "/populate", [{"name": "a", "upstream": echo.addr, "listen": listen_a},
                                  {"name": "b", "upstream": other.addr}])
    assert r.status_code == 201
    got = {p["name"]: p for p in r.json()["proxies"]}
    assert got["a"]["listen"] == listen_a and got["b"]["upstream"] == other.addr


@pytest.mark.parametrize("body,status,needle", [
    ([{"name": "a", "upstream": "127.0.0.1:1"}, {"name": "a", "upstream": "127.0.0.1:2"}], 400, "duplicate"),
    ([{"name": "a", "upstream": "127.0.0.1:1"}, {"upstream": "127.0.0.1:2"}], 400, "name at proxy 2"),
    ({"name": "a"}, 400, "expected a JSON array"),
])
def test_populate_bad_input_changes_nothing(api, body, status, needle):
    assert needle in error_of(api("POST", "/populate", body), status)
    assert api("GET", "/proxies").json() == {}


def test_populate_listen_in_use_is_500_and_not_added(api, echo):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        port = busy.getsockname()[1]
        r = api("POST", "/populate", [{"name": "x", "upstream": echo.addr,
                                       "listen": f"127.0.0.1:{port}"}])
        assert "in use" in error_of(r, 500)
        assert api("GET", "/proxies").json() == {}
    finally:
        busy.close()


def test_reset_enables_and_removes_toxics(api, echo):
    p = make(api, echo)
    api("POST", "/proxies/echo/toxics", {"type": "timeout"})
    api("POST", "/proxies/echo", {"enabled": False})
    r = api("POST", "/reset")
    assert r.status_code == 204 and r.content == b""
    body = api("GET", "/proxies/echo").json()
    assert body["enabled"] is True and body["toxics"] == [] and body["listen"] == p["listen"]
    with connect(int(p["listen"].rsplit(":", 1)[1])) as s:
        assert roundtrip(s)[0] == b"ping"


def test_unknown_route_and_wrong_method(api):
    error_of(api("GET", "/nope"), 404)
    error_of(api("PUT", "/proxies"), 405)
    error_of(api("DELETE", "/version"), 405)


def test_browser_user_agent_is_refused(api):
    assert api("GET", "/proxies", headers={"User-Agent": "Mozilla/5.0"}).status_code == 403


def test_bad_requests_do_not_disturb_other_connections(server, api, echo):
    p = make(api, echo)
    with connect(int(p["listen"].rsplit(":", 1)[1])) as live:
        assert roundtrip(live)[0] == b"ping"
        host, port = server.url.rsplit("/", 1)[1].split(":")
        for junk in (b"GARBAGE\r\n\r\n", b"POST /proxies HTTP/1.1\r\nContent-Length: 5\r\n\r\n{",
                     b"POST /proxies HTTP/1.1\r\nContent-Length: zz\r\n\r\n", b"\x00\xff" * 100):
            with socket.create_connection((host, int(port)), timeout=2) as raw:
                raw.sendall(junk)
                raw.shutdown(socket.SHUT_WR)
                try:
                    raw.recv(1000)
                except OSError:
                    pass
        api("POST", "/proxies", raw=b"{oops")
        api("POST", "/proxies/echo/toxics", {"type": "bandwidth", "attributes": {"rate": -1}})
        assert roundtrip(live, b"still here")[0] == b"still here"
    assert api("GET", "/version").status_code == 200


def test_curl_style_expect_continue(server, echo):
    """curl sends `Expect: 100-continue` with bodies; the server must not stall it."""
    import json
    import time
    host, port = server.url.rsplit("/", 1)[1].split(":")
    body = json.dumps({"name": "c", "upstream": echo.addr, "listen": "127.0.0.1:0"}).encode()
    with socket.create_connection((host, int(port)), timeout=5) as s:
        t = time.perf_counter()
        s.sendall(b"POST /proxies HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.endswith(b"\n"):
            reply += s.recv(4096)
        assert reply.startswith(b"HTTP/1.1 201") and time.perf_counter() - t < 1
