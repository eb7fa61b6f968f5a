"""Every toxic over real sockets, both streams, toxicity, and live add/update/remove."""
from __future__ import annotations

import socket
import time

import pytest

from .conftest import connect, read_all, roundtrip

pytestmark = pytest.mark.timeout(30)


def test_no_toxic_passes_data_both_ways(client, echo):
    p = client.create_proxy("echo", echo.addr)
    with connect(p.port) as s:
        payload = bytes(range(256)) * 4096           # 1 MiB, checks order and content
        got, _ = roundtrip(s, payload)
    assert got == payload


@pytest.mark.parametrize("stream", ["downstream", "upstream"])
def test_latency_delays_each_direction(client, echo, stream):
    p = client.create_proxy("echo", echo.addr)
    with connect(p.port) as s:
        _, base = roundtrip(s)
        client.add_toxic("echo", "latency", {"latency": 150}, stream=stream)   # on a live link
        got, slow = roundtrip(s)
        assert got == b"ping"
        assert 0.15 <= slow < 0.15 + base + 0.2
        client.remove_toxic("echo", f"latency_{stream}")
        _, fast = roundtrip(s)
        assert fast < 0.1


def test_latency_jitter_stays_in_bounds(client, echo):
    p = client.create_proxy("echo", echo.addr)
    client.add_toxic("echo", "latency", {"latency": 100, "jitter": 50})
    with connect(p.port) as s:
        times = [roundtrip(s)[1] for _ in range(8)]
    assert all(0.05 <= t < 0.25 for t in times), times
    assert max(times) - min(times) > 0.005         # jitter really varies the delay


def test_latency_update_applies_to_live_link(client, echo):
    p = client.create_proxy("echo", echo.addr)
    client.add_toxic("echo", "latency", {"latency": 300}, name="lat")
    with connect(p.port) as s:
        assert roundtrip(s)[1] >= 0.3
        t = client.update_toxic("echo", "lat", {"latency": 10})
        assert t.attributes == {"latency": 10, "jitter": 0}
        assert roundtrip(s)[1] < 0.2


def test_bandwidth_limits_rate(client, upstreams):
    up = upstreams("greet", b"z" * 60_000)
    p = client.create_proxy("bw", up.addr)
    client.add_toxic("bw", "bandwidth", {"rate": 100})           # 100 KB/s
    with connect(p.port) as s:
        t = time.perf_counter()
        data = read_all(s)
        elapsed = time.perf_counter() - t
    assert data == b"z" * 60_000
    assert 0.5 <= elapsed < 1.2, elapsed                         # 60 KB at 100 KB/s = 0.6 s


def test_bandwidth_upstream_only(client, upstreams):
    sink = upstreams("sink")
    p = client.create_proxy("bw", sink.addr)
    client.add_toxic("bw", "bandwidth", {"rate": 50}, stream="upstream")
    with connect(p.port) as s:
        t = time.perf_counter()
        s.sendall(b"u" * 25_000)
        deadline = time.time() + 5
        while len(sink.received) < 25_000 and time.time() < deadline:
            time.sleep(0.01)
        elapsed = time.perf_counter() - t
    assert len(sink.received) == 25_000
    assert 0.4 <= elapsed < 1.0, elapsed


def test_slow_close_delays_the_close(client, upstreams):
    up = upstreams("greet", b"bye")
    p = client.create_proxy("sc", up.addr)
    with connect(p.port) as s:
        t = time.perf_counter()
        assert read_all(s) == b"bye"
        fast = time.perf_counter() - t
    client.add_toxic("sc", "slow_close", {"delay": 400})
    with connect(p.port) as s:
        t = time.perf_counter()
        assert s.recv(10) == b"bye"
        t_data = time.perf_counter() - t
        assert read_all(s) == b""
        t_close = time.perf_counter() - t
    assert fast < 0.35
    assert t_close >= 0.4 and t_close - t_data >= 0.25    # only the close waits, not the data


def test_timeout_zero_is_a_black_hole_until_removed(client, echo):
    p = client.create_proxy("bh", echo.addr)
    client.add_toxic("bh", "timeout", {"timeout": 0}, name="hole")
    with connect(p.port, timeout=0.5) as s:
        s.sendall(b"lost")
        with pytest.raises(socket.timeout):          # nothing comes back, nothing closes
            s.recv(10)
        client.remove_toxic("bh", "hole")
        s.settimeout(5)
        assert roundtrip(s, b"again")[0] == b"again"


def test_timeout_closes_after_delay(client, echo):
    p = client.create_proxy("to", echo.addr)
    client.add_toxic("to", "timeout", {"timeout": 300})
    with connect(p.port) as s:
        t = time.perf_counter()
        s.sendall(b"dropped")
        try:
            data = read_all(s)
        except ConnectionResetError:
            data = b""
        elapsed = time.perf_counter() - t
    assert data == b""
    assert 0.25 <= elapsed < 1.5, elapsed


def test_reset_peer_sends_rst(client, echo):
    p = client.create_proxy("rp", echo.addr)
    client.add_toxic("rp", "reset_peer", {"timeout": 0})
    with connect(p.port) as s:
        s.sendall(b"hello")
        with pytest.raises(ConnectionResetError):
            for _ in range(10):
                if not s.recv(10):
                    break
                time.sleep(0.05)


def test_reset_peer_after_timeout(client, echo):
    p = client.create_proxy("rp", echo.addr)
    client.add_toxic("rp", "reset_peer", {"timeout": 300}, stream="upstream")
    with connect(p.port) as s:
        t = time.perf_counter()
        s.sendall(b"hello")
        with pytest.raises(ConnectionResetError):
            s.recv(10)
        assert time.perf_counter() - t >= 0.28


def test_slicer_splits_into_small_pieces(client, upstreams):
    payload = bytes(range(256)) * 8                  # 2048 bytes in one send
    up = upstreams("greet", payload)
    p = client.create_proxy("sl", up.addr)
    client.add_toxic("sl", "slicer", {"average_size": 64, "size_variation": 16, "delay": 3000})
    with connect(p.port) as s:
        reads = []
        while True:
            part = s.recv(65536)
            if not part:
                break
            reads.append(part)
    assert b"".join(reads) == payload
    assert len(reads) >= 16                          # ~32 slices; the client reads them apart
    # a busy machine may coalesce two slices in one read, but most reads are single slices
    assert sorted(len(r) for r in reads)[len(reads) // 2] <= 64 + 16


def test_slicer_cuts_respect_size_and_variation():
    from chaosbench.proxy.toxics import Slicer
    toxic = Slicer("s", "downstream", 1.0, {"average_size": 100, "size_variation": 20, "delay": 0})
    for size in (1, 99, 100, 121, 5000, 65536):
        cuts = toxic._cuts(size)
        sizes = [b - a for a, b in zip([0] + cuts, cuts)]
        assert sum(sizes) == size and cuts[-1] == size
        assert all(80 <= n <= 120 for n in sizes[:-1]) and 0 < sizes[-1] <= 120


def test_limit_data_closes_after_bytes(client, upstreams):
    up = upstreams("greet", b"a" * 1000)
    p = client.create_proxy("ld", up.addr)
    client.add_toxic("ld", "limit_data", {"bytes": 100})
    with connect(p.port) as s:
        assert read_all(s) == b"a" * 100


def test_limit_data_upstream(client, upstreams):
    sink = upstreams("sink")
    p = client.create_proxy("ld", sink.addr)
    client.add_toxic("ld", "limit_data", {"bytes": 10}, stream="upstream")
    with connect(p.port) as s:
        try:
            s.sendall(b"0123456789abcdef")
            read_all(s)
        except ConnectionResetError:
            pass
    time.sleep(0.2)
    assert bytes(sink.received) == b"0123456789"


def test_toxicity_zero_never_applies_and_one_always(client, echo):
    p = client.create_proxy("tx", echo.addr)
    client.add_toxic("tx", "latency", {"latency": 300}, toxicity=0.0, name="never")
    with connect(p.port) as s:
        assert roundtrip(s)[1] < 0.2
    client.update_toxic("tx", "never", toxicity=1.0)
    with connect(p.port) as s:
        assert roundtrip(s)[1] >= 0.3


def test_toxicity_half_applies_to_some_connections(client, echo):
    p = client.create_proxy("tx", echo.addr)
    client.add_toxic("tx", "latency", {"latency": 100}, toxicity=0.5)
    slow = 0
    for _ in range(24):                              # P(all same) = 2 * 0.5**24
        with connect(p.port) as s:
            slow += roundtrip(s)[1] >= 0.1
    assert 0 < slow < 24


def test_toxics_chain_in_order(client, upstreams):
    up = upstreams("greet", b"x" * 5000)
    p = client.create_proxy("ch", up.addr)
    client.add_toxic("ch", "limit_data", {"bytes": 3000})
    client.add_toxic("ch", "latency", {"latency": 200})
    with connect(p.port) as s:
        t = time.perf_counter()
        data = read_all(s)
        elapsed = time.perf_counter() - t
    assert data == b"x" * 3000 and elapsed >= 0.2


def test_toxics_toggled_during_a_bulk_transfer_keep_bytes_in_order(client, echo):
    """Switching between the zero-copy path and the toxic path never loses or reorders data,
    also when the switch happens while the destination is full and bytes wait in the proxy."""
    import threading
    p = client.create_proxy("bulk", echo.addr)
    payload = bytes(range(251)) * 40_000                 # ~10 MB, period 251: reorders show
    got = bytearray()
    with connect(p.port, timeout=20) as s:
        def send():
            s.sendall(payload)

        def read():
            while len(got) < len(payload):
                part = s.recv(1 << 20)
                if not part:
                    return
                got.extend(part)
        sender = threading.Thread(target=send, daemon=True)
        reader = threading.Thread(target=read, daemon=True)
        sender.start()
        time.sleep(0.5)                                  # nobody reads: every buffer fills up
        for i in range(6):
            if i % 2 == 0:
                client.add_toxic("bulk", "slicer", {"average_size": 4096, "size_variation": 1000},
                                 name="sl", stream="upstream" if i % 4 else "downstream")
                client.add_toxic("bulk", "latency", {"latency": 5}, name="lat")
            else:
                client.remove_toxic("bulk", "sl")
                client.remove_toxic("bulk", "lat")
            if i == 0:
                reader.start()
            time.sleep(0.1)
        sender.join(20)
        reader.join(20)
    assert len(got) == len(payload) and bytes(got) == payload


def test_direction_returns_to_zero_copy_after_toxics_are_removed(server, client, echo):
    p = client.create_proxy("z", echo.addr)
    with connect(p.port) as s:
        assert roundtrip(s)[0] == b"ping"
        link = next(iter(server.api.proxies["z"].links))
        assert all(pipe.splicer is not None for pipe in link.pipes.values())
        client.add_toxic("z", "latency", {"latency": 1}, stream="upstream")
        assert roundtrip(s)[0] == b"ping"
        assert link.pipes["upstream"].splicer is None and link.pipes["downstream"].splicer
        client.remove_toxic("z", "latency_upstream")
        for _ in range(3):
            assert roundtrip(s)[0] == b"ping"
        assert link.pipes["upstream"].splicer is not None


def test_toxic_that_lost_its_roll_leaves_the_zero_copy_path(server, client, echo):
    p = client.create_proxy("r", echo.addr)
    client.add_toxic("r", "latency", {"latency": 300}, toxicity=0.0)
    with connect(p.port) as s:
        assert roundtrip(s)[1] < 0.2
        link = next(iter(server.api.proxies["r"].links))
        assert link.pipes["downstream"].splicer is not None


def test_unreachable_upstream_closes_the_client_and_keeps_serving(client, echo):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]                  # nothing listens here any more
    p = client.create_proxy("dead", f"127.0.0.1:{dead}")
    with connect(p.port) as s:
        try:
            assert s.recv(10) == b""
        except ConnectionResetError:
            pass
    client.update("dead", upstream=echo.addr)       # the service is back
    with connect(p.port) as s:
        assert roundtrip(s)[0] == b"ping"
