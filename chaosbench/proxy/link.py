"""One proxied TCP connection: client <-> proxy <-> upstream, as two one-way pipes.

Three paths per direction, chosen as toxics come and go (bytes always stay in order):
- zero-copy: no toxic acts on the direction -> a Splicer moves bytes inside the kernel;
- plain: bytes go from `data_received` straight to the other transport's `write`, with
  asyncio's flow control (used while switching back, or where splice(2) is missing);
- toxic: chunks are stamped on arrival and queued; a worker task runs each through the
  toxic chain. Reading continues while the worker sleeps (bounded by MAX_QUEUED bytes), so
  a latency toxic delays every chunk by the configured time instead of throttling throughput.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import random
import socket
import struct
import time
from typing import TYPE_CHECKING

from .splice import AVAILABLE as SPLICE, Splicer
from .toxics import Chunk, CloseLink, ResetLink, Toxic, ToxicState

if TYPE_CHECKING:
    from .proxy import Proxy

log = logging.getLogger("chaosbench.proxy")

MAX_QUEUED = 4 * 1024 * 1024      # bytes held per direction before the source is paused
WRITE_HIGH_WATER = 4 * 1024 * 1024
READ_SIZE = 1024 * 1024


def _tune(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
    if hasattr(transport, "set_write_buffer_limits"):
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
    if isinstance(getattr(transport, "max_size", None), int):
        # selector transports read at most 256 KiB per call; bigger reads halve the
        # per-chunk Python overhead on bulk transfers
        transport.max_size = READ_SIZE


class Side(asyncio.Protocol):
    """asyncio protocol for one of the link's two sockets."""

    def __init__(self, link: "Link", name: str):
        self.link = link
        self.name = name
        self.transport: asyncio.Transport | None = None
        self.out_pipe: Pipe | None = None   # pipe reading from this side
        self.in_pipe: Pipe | None = None    # pipe writing to this side
        self.closed = False

    def connection_made(self, transport):
        self.transport = transport
        _tune(transport)
        if self.name == "client":
            self.link.client_connected(self)

    def data_received(self, data):
        self.out_pipe.feed(data)

    def eof_received(self):
        self.out_pipe.feed(None)
        return True                          # keep the write side open (half-close)

    def connection_lost(self, exc):
        self.closed = True
        self.link.side_lost(self, exc)

    def pause_writing(self):
        self.in_pipe.set_paused("dst_full", True)

    def resume_writing(self):
        self.in_pipe.set_paused("dst_full", False)


class Pipe:
    """One direction of a link: src side -> toxic chain -> dst side."""

    def __init__(self, link: "Link", direction: str, src: Side, dst: Side):
        self.link, self.direction, self.src, self.dst = link, direction, src, dst
        src.out_pipe, dst.in_pipe = self, self
        self.chain: list[tuple[Toxic, ToxicState]] = []
        self.toxic = False                     # some toxic acts on this direction
        self.queue: collections.deque[Chunk] = collections.deque()
        self.queued = 0
        self.worker: asyncio.Task | None = None
        self.pause_reasons: set[str] = set()
        self.writable = asyncio.Event()
        self.writable.set()
        self.eof_sent = False
        self.src_eof = False
        self.splicer: Splicer | None = None
        # bytes (and EOF) that arrive before the destination is connected; held, not dropped
        self.holding = dst.name == "upstream"
        self.early = bytearray()
        self.early_eof = False

    # -- toxics ---------------------------------------------------------------------------------
    def sync(self, toxics: list[Toxic]) -> None:
        """Bring this pipe's chain in line with the proxy's toxics for its direction."""
        old = {t.name: (t, st) for t, st in self.chain}
        chain = []
        for toxic in toxics:
            prev = old.pop(toxic.name, None)
            if prev is not None and prev[0] is toxic:
                chain.append(prev)
                continue
            state = ToxicState(active=random.random() < toxic.toxicity)
            if prev is not None:               # updated: keep counters, restart the toxic
                prev[0].deactivate(prev[1])
                state.counter, state.next_free = prev[1].counter, prev[1].next_free
            if state.active:
                toxic.activate(state, self.link.close)
            chain.append((toxic, state))
        for toxic, state in old.values():      # removed
            toxic.deactivate(state)
        self.chain = chain
        # toxics that lost their toxicity roll for this connection cost nothing
        self.toxic = any(state.active for _, state in chain)
        self._choose_path()

    def _choose_path(self) -> None:
        """Splice while the direction has no toxic; leave splicing, in order, when one comes."""
        if self.toxic and self.splicer is not None:
            saw_eof = self.splicer.eof and not self.eof_sent
            left = self.splicer.stop()
            self.splicer = None
            if saw_eof:                        # the source closed while bytes were in the pipe
                self.src_eof = True
                self.queue.appendleft(Chunk(None, time.monotonic()))
            if left:
                self.queue.appendleft(Chunk(left, time.monotonic()))
                self.queued += len(left)
            if self.queue and self.worker is None:
                self.worker = asyncio.get_running_loop().create_task(self._work())
            self.set_paused("splice", False)
        elif not self.toxic and self.splicer is None and self._can_splice():
            self.splicer = Splicer(self.src.transport.get_extra_info("socket").fileno(),
                                   self.dst.transport.get_extra_info("socket").fileno(),
                                   self._splice_eof, self._splice_error)
            self.set_paused("splice", True)

    def _can_splice(self) -> bool:
        src, dst = self.src.transport, self.dst.transport
        return (SPLICE and self.worker is None and not self.src_eof and not self.eof_sent
                and src is not None and dst is not None and not src.is_closing()
                and not dst.is_closing() and dst.get_write_buffer_size() == 0
                and src.get_extra_info("socket") is not None)

    def _splice_eof(self) -> None:
        self.src_eof = True
        self._emit_now(None)

    def _splice_error(self, exc: OSError) -> None:
        self.splicer = None
        log.debug("proxy %s: %s: %s", self.link.proxy.name, self.direction, exc)
        self.link.abort()

    def stop(self) -> None:
        if self.splicer is not None:
            self.splicer.stop()
            self.splicer = None
        for toxic, state in self.chain:
            toxic.deactivate(state)
        self.chain = []
        self.toxic = False
        if self.worker is not None:
            self.worker.cancel()

    # -- data -----------------------------------------------------------------------------------
    def feed(self, data: bytes | None) -> None:
        if self.holding:                       # upstream still connecting: hold, in order
            self._hold(data)
            return
        if data is None:
            if self.src_eof:                   # already seen by the splicer: pass it on once
                return
            self.src_eof = True
        self._route(data)

    def _route(self, data: bytes | None) -> None:
        if not self.toxic and self.worker is None:
            self._emit_now(data)
            if self.splicer is None and data is not None:
                self._choose_path()        # back to zero-copy once the toxic path drained
            return
        self.queue.append(Chunk(data, time.monotonic()))
        if data:
            self.queued += len(data)
            if self.queued > MAX_QUEUED:
                self.set_paused("queue_full", True)
        if self.worker is None:
            self.worker = asyncio.get_running_loop().create_task(self._work())

    def _hold(self, data: bytes | None) -> None:
        if data is None:
            self.early_eof = True
            return
        self.early += data
        if len(self.early) > MAX_QUEUED:
            self.set_paused("queue_full", True)

    def flush_early(self) -> None:
        """The destination just connected and the chain is synced: send what was held first."""
        self.holding = False
        data, self.early = bytes(self.early), bytearray()
        eof, self.early_eof = self.early_eof, False
        if not data and not eof:
            return
        if self.splicer is not None:           # started in this same callback: nothing read yet
            self.splicer.stop()
            self.splicer = None
            self.set_paused("splice", False)
        if eof:
            self.src_eof = True                # the source is done: no splicer may start
        if data:
            self._route(data)
        self.set_paused("queue_full", False)
        if eof:
            self._route(None)

    def _emit_now(self, data: bytes | None) -> None:
        dst = self.dst.transport
        if dst is None or dst.is_closing():
            return
        if data is None:
            self.eof_sent = True
            if dst.can_write_eof():
                dst.write_eof()
            self.link.check_done()
        else:
            dst.write(data)

    async def _work(self) -> None:
        try:
            while self.queue:
                chunk = self.queue.popleft()
                if chunk.data:
                    self.queued -= len(chunk.data)
                    if self.queued <= MAX_QUEUED // 2:
                        self.set_paused("queue_full", False)
                await self._through(0, list(self.chain), chunk)
        except CloseLink:
            self.link.close()
        except ResetLink:
            self.link.reset()
        except asyncio.CancelledError:
            pass
        except Exception:                      # a bug here must not take the proxy down
            log.exception("proxy %s: %s pipe failed", self.link.proxy.name, self.direction)
            self.link.abort()
        finally:
            self.worker = None

    async def _through(self, i: int, chain: list, chunk: Chunk) -> None:
        while i < len(chain) and not chain[i][1].active:
            i += 1
        if i == len(chain):
            await self.writable.wait()
            self._emit_now(chunk.data)
            return
        toxic, state = chain[i]
        async for out in toxic.pipe(state, chunk):
            await self._through(i + 1, chain, out)

    def set_paused(self, reason: str, on: bool) -> None:
        before = bool(self.pause_reasons)
        (self.pause_reasons.add if on else self.pause_reasons.discard)(reason)
        if reason == "dst_full":
            (self.writable.clear if on else self.writable.set)()
        after = bool(self.pause_reasons)
        src = self.src.transport
        if before == after or src is None or src.is_closing():
            return
        (src.pause_reading if after else src.resume_reading)()


class Link:
    def __init__(self, proxy: "Proxy"):
        self.proxy = proxy
        self.client = Side(self, "client")
        self.upstream = Side(self, "upstream")
        self.pipes = {"upstream": Pipe(self, "upstream", self.client, self.upstream),
                      "downstream": Pipe(self, "downstream", self.upstream, self.client)}
        self.done = False
        self._connect_task: asyncio.Task | None = None

    def client_connected(self, side: Side) -> None:
        # No pause_reading() here: CPython <= 3.11.2 ignores a pause made in connection_made
        # (the transport registers its reader afterwards anyway), so the client is read while
        # the upstream connects and the upstream pipe holds those bytes (bounded by MAX_QUEUED).
        self.proxy.links.add(self)
        self._connect_task = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        host, port = self.proxy.upstream_addr()
        try:
            await asyncio.get_running_loop().create_connection(lambda: self.upstream, host, port)
        except (OSError, asyncio.CancelledError) as exc:
            log.warning("proxy %s: cannot connect to upstream %s: %s",
                        self.proxy.name, self.proxy.upstream, exc)
            self.abort()
            return
        if self.done:
            self.abort()
            return
        self.sync()
        self.pipes["upstream"].flush_early()

    def sync(self) -> None:
        for direction, pipe in self.pipes.items():
            pipe.sync(self.proxy.toxics_for(direction))

    def check_done(self) -> None:
        if all(p.eof_sent for p in self.pipes.values()):
            self.close()

    def side_lost(self, side: Side, exc: Exception | None) -> None:
        other = self.upstream if side is self.client else self.client
        if exc is not None and other.transport is not None:
            other.transport.abort()            # an error on one socket kills the other
        elif other.transport is not None:
            other.transport.close()
        self._finish()

    def _finish(self) -> None:
        if not self.done:
            self.done = True
            for pipe in self.pipes.values():
                pipe.stop()
            if self._connect_task is not None and not self._connect_task.done():
                self._connect_task.cancel()
            self.proxy.links.discard(self)

    def close(self) -> None:
        """Graceful close: flush what is buffered, then FIN both ways."""
        for side in (self.client, self.upstream):
            if side.transport is not None:
                side.transport.close()
        self._finish()

    def abort(self) -> None:
        """Drop the connection now (proxy disabled or deleted)."""
        for side in (self.client, self.upstream):
            if side.transport is not None:
                side.transport.abort()
        self._finish()

    def reset(self) -> None:
        """RST both peers (SO_LINGER 0 discards unsent data), as Toxiproxy's reset_peer does."""
        for side in (self.client, self.upstream):
            sock = side.transport.get_extra_info("socket") if side.transport else None
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
        self.abort()
