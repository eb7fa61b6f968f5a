"""Bytes a client sends while the proxy is still connecting upstream must arrive, in order.

CPython <= 3.11.2 (Debian bookworm, our node image) ignores a transport's pause_reading()
made in connection_made: the transport registers its reader right after anyway. The proxy
then read the client before the upstream existed; those bytes were dropped, and with splice
on, the transport and the splicer both read the client socket (garbled HTTP, 414s, stalls).
`old_asyncio` puts that CPython behaviour back on any 3.11 host; `slow_connect` widens the
window that a container network (MTU 1400, real round trips) opens on its own.
"""
from __future__ import annotations

import asyncio
import socket
import time
from asyncio import selector_events

import pytest

import chaosbench.proxy.link as link_mod

from .conftest import connect

pytestmark = pytest.mark.timeout(30)

SIZE = 6 * 1024 * 1024            # more than link.MAX_QUEUED: the held bytes overflow once


def _add_reader_3112(self, fd, callback, *args):
    """selector_events._SelectorTransport._add_reader as CPython 3.11.0-3.11.2 ship it."""
    if self._closing:
        return
    self._loop._add_reader(fd, callback, *args)


@pytest.fixture(params=["cpython-3.11.2", "this-python"])
def old_asyncio(request, monkeypatch):
    if request.param == "cpython-3.11.2":
        monkeypatch.setattr(selector_events._SelectorTransport, "_add_reader", _add_reader_3112)
    return request.param


@pytest.fixture
def slow_connect(monkeypatch):
    connect_upstream = link_mod.Link._connect

    async def slow(self):
        await asyncio.sleep(0.3)
        await connect_upstream(self)
    monkeypatch.setattr(link_mod.Link, "_connect", slow)


def _pattern(n: int) -> bytes:
    block = bytes((i * 7) % 251 for i in range(251 * 64))
    return (block * (n // len(block) + 1))[:n]


def _wait_received(up, n: int, timeout: float = 10.0) -> bytes:
    end = time.monotonic() + timeout
    while len(up.received) < n and time.monotonic() < end:
        time.sleep(0.02)
    time.sleep(0.05)                  # anything extra (duplicates) shows up too
    return bytes(up.received)


@pytest.mark.parametrize("splice", [True, False], ids=["splice", "no-splice"])
@pytest.mark.parametrize("eof", [False, True], ids=["open", "half-closed"])
def test_bytes_sent_before_upstream_connects_arrive_in_order(
        old_asyncio, slow_connect, client, upstreams, monkeypatch, splice, eof):
    monkeypatch.setattr(link_mod, "SPLICE", splice and link_mod.SPLICE)
    up = upstreams("sink")
    p = client.create_proxy("early", up.addr)
    payload = _pattern(SIZE)
    with connect(p.port) as s:
        s.sendall(payload[:100_000])  # all of it lands before the upstream exists
        if eof:
            s.sendall(payload[100_000:])
            s.shutdown(socket.SHUT_WR)
        else:
            time.sleep(0.5)           # upstream connected now: the rest takes the normal path
            s.sendall(payload[100_000:])
        got = _wait_received(up, SIZE)
    assert len(got) == SIZE, f"upstream got {len(got)} of {SIZE} bytes"
    assert got == payload, "bytes reordered or replaced"


def test_toxic_applies_to_bytes_held_while_connecting(old_asyncio, slow_connect, client, upstreams):
    up = upstreams("sink")
    p = client.create_proxy("early", up.addr)
    client.add_toxic("early", "latency", {"latency": 400}, stream="upstream")
    with connect(p.port) as s:
        t = time.monotonic()
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
        got = _wait_received(up, 18)
        took = time.monotonic() - t
    assert got == b"GET / HTTP/1.1\r\n\r\n"
    assert took >= 0.4, took          # the held request went through the latency toxic
