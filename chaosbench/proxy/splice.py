"""Zero-copy forwarding for a toxic-free direction (Linux splice(2) through a pipe).

Bytes move socket -> pipe -> socket inside the kernel, never through Python objects, which
cuts the proxy's CPU per byte by several times on bulk transfers. While a Splicer runs, the
source transport's own reading is paused and the splicer drives the file descriptors from the
event loop; `stop()` hands back whatever sits in the pipe so the normal path can go on in
order when a toxic is added.
"""
from __future__ import annotations

import asyncio
import fcntl
import os
from typing import Callable

CHUNK = 1024 * 1024
_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)
_F_SETPIPE_SZ = 1031
# CHAOSBENCH_PROXY_SPLICE=0 forces the plain asyncio path (to compare, or to rule splice out)
AVAILABLE = hasattr(os, "splice") and os.environ.get("CHAOSBENCH_PROXY_SPLICE", "1") != "0"


class Splicer:
    def __init__(self, src_fd: int, dst_fd: int, on_eof: Callable[[], None],
                 on_error: Callable[[OSError], None]):
        self.loop = asyncio.get_running_loop()
        # asyncio refuses add_reader on a transport's own fd; duplicates of the same sockets
        # are separate epoll registrations, closed again in stop()
        self.src_fd, self.dst_fd = os.dup(src_fd), os.dup(dst_fd)
        self.on_eof, self.on_error = on_eof, on_error
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.fcntl(self.w, _F_SETPIPE_SZ, CHUNK)
        except OSError:
            pass                              # default 64 KiB pipe still works
        self.pending = 0                      # bytes in the pipe, not yet sent
        self.eof = False
        self.stopped = False
        self.loop.add_reader(self.src_fd, self._readable)

    def _readable(self) -> None:
        try:
            n = os.splice(self.src_fd, self.w, CHUNK, flags=_FLAGS)
        except BlockingIOError:
            return
        except OSError as exc:
            self._fail(exc)
            return
        if n == 0:
            self.eof = True
            self.loop.remove_reader(self.src_fd)
        self.pending += n
        self._flush()

    def _flush(self) -> None:
        while self.pending:
            try:
                n = os.splice(self.r, self.dst_fd, self.pending, flags=_FLAGS)
            except BlockingIOError:
                # destination full: stop reading until it drains (back-pressure)
                self.loop.remove_reader(self.src_fd)
                self.loop.add_writer(self.dst_fd, self._writable)
                return
            except OSError as exc:
                self._fail(exc)
                return
            self.pending -= n
        if self.eof:
            self.on_eof()

    def _writable(self) -> None:
        self.loop.remove_writer(self.dst_fd)
        self._flush()
        if not self.pending and not self.eof and not self.stopped:
            self.loop.add_reader(self.src_fd, self._readable)

    def _fail(self, exc: OSError) -> None:
        self.stop()
        self.on_error(exc)

    def stop(self) -> bytes:
        """Stop splicing; returns the bytes still in the pipe (to be sent next, in order)."""
        if self.stopped:
            return b""
        self.stopped = True
        self.loop.remove_reader(self.src_fd)
        self.loop.remove_writer(self.dst_fd)
        left = bytearray()
        while self.pending > len(left):
            try:
                part = os.read(self.r, self.pending - len(left))
            except (BlockingIOError, OSError):
                break
            if not part:
                break
            left += part
        for fd in (self.r, self.w, self.src_fd, self.dst_fd):
            os.close(fd)
        return bytes(left)
