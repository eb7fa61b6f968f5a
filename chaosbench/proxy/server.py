"""ProxyServer: the API plus its proxies on one asyncio loop, embeddable or run as a process.

    srv = ProxyServer("127.0.0.1", 0)     # port 0: pick a free port
    srv.start_in_thread()                 # returns once the API is listening
    srv.url                               # e.g. "http://127.0.0.1:41234"
    srv.stop()                            # closes the API, every proxy and every connection
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

from .api import Api, ApiError
from .client import ProxyClient
from .http import HttpServer

log = logging.getLogger("chaosbench.proxy")


class ProxyServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 8474):
        self.host, self.port = host, port
        self.api = Api()
        self._http = HttpServer(self.api.handle)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def client(self, timeout: float = 10.0) -> ProxyClient:
        """A ProxyClient for this server (state changes go through the HTTP API, as for
        any Toxiproxy, so code written against this server works against the real one)."""
        return ProxyClient(self.url, timeout=timeout)

    # -- async core ---------------------------------------------------------------------------
    async def start(self, populate: list[dict] | None = None) -> None:
        """Bind the API (and create `populate` proxies first); raises on failure."""
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        if populate is not None:
            status, body = await self.api.populate(_encode(populate))
            if status != 201:
                raise ApiError(status, body.get("error", str(body)))
        self.port = await self._http.start(self.host, self.port)
        log.info("API listening on %s:%s", self.host, self.port)

    async def shutdown(self) -> None:
        await self._http.stop()
        await self.api.shutdown()
        if self._stopped is not None:
            self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # -- thread embedding ---------------------------------------------------------------------
    def start_in_thread(self, populate: list[dict] | None = None, timeout: float = 10.0) -> "ProxyServer":
        ready = threading.Event()
        error: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start(populate))
            except BaseException as exc:       # report bind errors to the caller
                error.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_until_complete(self.wait_stopped())
            finally:
                loop.run_until_complete(_cancel_pending())
                loop.close()

        self._thread = threading.Thread(target=run, name="chaosbench-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError(f"proxy API did not start within {timeout}s")
        if error:
            self._thread.join(timeout)
            raise error[0]
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            return
        fut = asyncio.run_coroutine_threadsafe(self.shutdown(), self._loop)
        fut.result(timeout)
        self._thread.join(timeout)

    def __enter__(self) -> "ProxyServer":
        return self.start_in_thread()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


async def _cancel_pending() -> None:
    """Let closing transports finish and cancel what is left (pipe workers, connects)."""
    await asyncio.sleep(0)
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _encode(obj: Any) -> bytes:
    return json.dumps(obj).encode()
