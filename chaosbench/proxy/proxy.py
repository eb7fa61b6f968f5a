"""A named proxy: a listener, its live links and its ordered toxics (Toxiproxy's model)."""
from __future__ import annotations

import asyncio
import logging

from .link import Link
from .toxics import Toxic

log = logging.getLogger("chaosbench.proxy")


class AddressError(ValueError):
    pass


def parse_address(value: object, field: str) -> tuple[str, int]:
    """'host:port', '[v6]:port' or ':port' -> (host, port); raises AddressError naming the field."""
    if not isinstance(value, str) or ":" not in value:
        raise AddressError(f"{field} must be a string 'host:port', got {value!r}")
    host, _, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise AddressError(f"{field} has an invalid port in {value!r}")
    return host, int(port)


class Proxy:
    def __init__(self, name: str, listen: str, upstream: str):
        parse_address(listen, "listen")
        parse_address(upstream, "upstream")
        self.name, self.listen, self.upstream = name, listen, upstream
        self.enabled = False
        self.toxics: list[Toxic] = []
        self.links: set[Link] = set()
        self._server: asyncio.base_events.Server | None = None

    def upstream_addr(self) -> tuple[str, int]:
        return parse_address(self.upstream, "upstream")

    def toxics_for(self, direction: str) -> list[Toxic]:
        return [t for t in self.toxics if t.stream == direction]

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen (raises OSError, e.g. address in use); `listen` then holds the real port."""
        if self.enabled:
            return
        host, port = parse_address(self.listen, "listen")
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Link(self).client, host or "0.0.0.0", port, reuse_address=True, backlog=512)
        bound = self._server.sockets[0].getsockname()[1]
        self.listen = f"{self.listen.rpartition(':')[0] or '0.0.0.0'}:{bound}"
        self.enabled = True
        log.info("proxy %s listening on %s -> %s", self.name, self.listen, self.upstream)

    async def stop(self) -> None:
        """Stop listening and drop every existing connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for link in list(self.links):
            link.abort()
        if self.enabled:
            log.info("proxy %s disabled (%s)", self.name, self.listen)
        self.enabled = False

    async def update(self, listen: str, upstream: str, enabled: bool) -> None:
        parse_address(listen, "listen")
        parse_address(upstream, "upstream")
        if listen != self.listen or upstream != self.upstream:
            await self.stop()
            self.listen, self.upstream = listen, upstream
        if enabled and not self.enabled:
            await self.start()
        elif not enabled and self.enabled:
            await self.stop()

    # -- toxics -------------------------------------------------------------------------------
    def find_toxic(self, name: str) -> Toxic | None:
        return next((t for t in self.toxics if t.name == name), None)

    def set_toxic(self, toxic: Toxic) -> None:
        """Add, or replace the toxic of the same name in place, and apply to live links."""
        for i, t in enumerate(self.toxics):
            if t.name == toxic.name:
                self.toxics[i] = toxic
                break
        else:
            self.toxics.append(toxic)
        self._sync_links()

    def remove_toxic(self, name: str) -> None:
        self.toxics = [t for t in self.toxics if t.name != name]
        self._sync_links()

    def reset_toxics(self) -> None:
        self.toxics = []
        self._sync_links()

    def _sync_links(self) -> None:
        for link in list(self.links):
            if link.upstream.transport is not None:
                link.sync()

    def to_json(self) -> dict:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream,
                "enabled": self.enabled, "toxics": [t.to_json() for t in self.toxics]}
