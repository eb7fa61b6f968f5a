"""A minimal HTTP/1.1 server on asyncio streams, enough for a JSON control API.

It runs on the same event loop as the proxies, so handlers change proxy state without locks.
Keep-alive is supported (clients such as requests reuse connections); bodies need
Content-Length. A malformed request gets a 400 and closes only its own connection.
"""
from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus
from typing import Any, Awaitable, Callable

log = logging.getLogger("chaosbench.proxy.api")

MAX_BODY = 1024 * 1024
Handler = Callable[[str, str, bytes, dict[str, str]], Awaitable[tuple[int, Any]]]


class HttpServer:
    def __init__(self, handler: Handler):
        self.handler = handler
        self.server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self._serve, host, port, reuse_address=True)
        return self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in list(self._conns):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._conns.discard(writer)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            await self._send(writer, 400, {"error": "malformed request line", "status": 400}, False)
            return False
        method, target, version = parts
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            await self._send(writer, 411, {"error": "send the body with Content-Length",
                                           "status": 411}, False)
            return False
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            await self._send(writer, 400, {"error": f"bad Content-Length (max {MAX_BODY})",
                                           "status": 400}, False)
            return False
        if length and headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")     # curl waits for this
        body = await reader.readexactly(length) if length else b""
        keep = (version == "HTTP/1.1" and headers.get("connection", "").lower() != "close")
        try:
            status, payload = await self.handler(method, target.split("?")[0], body, headers)
        except Exception as exc:                 # never let one request kill the server
            log.exception("API handler failed for %s %s", method, target)
            status, payload = 500, {"error": f"internal error: {exc}", "status": 500}
        log.debug("%s %s -> %s", method, target, status)
        await self._send(writer, status, payload, keep)
        return keep

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, status: int, payload: Any, keep: bool) -> None:
        body = b"" if payload is None else (json.dumps(payload) + "\n").encode()
        reason = HTTPStatus(status).phrase
        head = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}",
                "Connection: " + ("keep-alive" if keep else "close")]
        if payload is not None:
            head.append("Content-Type: application/json")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
