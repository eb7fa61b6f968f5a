"""Toxiproxy 2.x HTTP API over a collection of proxies: routes, JSON shapes, status codes.

Errors use Toxiproxy's body `{"error": "...", "status": N}`: 400 bad input, 404 unknown
proxy/toxic, 409 duplicate, 500 when a listener cannot bind (as Toxiproxy does).
"""
from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

from .proxy import AddressError, Proxy, parse_address
from .toxics import ToxicError, build_toxic, updated_toxic

VERSION = "2.12.0-chaosbench"


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _bad(message: str) -> ApiError:
    return ApiError(400, f"bad request body: {message}")


def _json(body: bytes, expect: type) -> Any:
    try:
        value = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"malformed JSON ({exc})")
    if not isinstance(value, expect):
        raise _bad(f"expected a JSON {'object' if expect is dict else 'array'}")
    return value


def _check_proxy_fields(body: dict, where: str = "") -> None:
    for field in ("name", "upstream"):
        if not isinstance(body.get(field), str) or not body[field]:
            raise ApiError(400, f"missing required field: {field}{where}")
    for field in ("listen",):
        if field in body and not isinstance(body[field], str):
            raise _bad(f"{field}{where} must be a string 'host:port'")
    if "enabled" in body and not isinstance(body["enabled"], bool):
        raise _bad(f"enabled{where} must be true or false")


def _collection(path: str, name: str) -> list[tuple[str, str, str]]:
    """A Toxiproxy collection's five routes: list and create at `path`, show, update, delete one below it."""
    item = path + r"/([^/]+)"
    return [("GET", path, f"{name}_index"), ("POST", path, f"{name}_create"), ("GET", item, f"{name}_show"),
            ("POST|PATCH", item, f"{name}_update"), ("DELETE", item, f"{name}_delete")]


ROUTES = [
    ("GET", r"/version", "version"),
    ("POST", r"/reset", "reset"),
    ("POST", r"/populate", "populate"),
    *_collection(r"/proxies", "proxy"),
    *_collection(r"/proxies/([^/]+)/toxics", "toxic"),
]
_COMPILED = [(m.split("|"), re.compile(p + "/?"), h) for m, p, h in ROUTES]


class Api:
    def __init__(self) -> None:
        self.proxies: dict[str, Proxy] = {}

    async def handle(self, method: str, path: str, body: bytes, headers: dict) -> tuple[int, Any]:
        if headers.get("user-agent", "").startswith("Mozilla/"):
            # as Toxiproxy: a web page must not be able to drive the API from a browser
            return 403, {"error": "User agent not allowed", "status": 403}
        allowed = False
        for methods, pattern, name in _COMPILED:
            m = pattern.fullmatch(path)
            if not m:
                continue
            allowed = True
            if method in methods:
                try:
                    return await getattr(self, name)(body, *map(unquote, m.groups()))
                except ApiError as err:
                    return err.status, {"error": err.message, "status": err.status}
        if allowed:
            return 405, {"error": f"method {method} not allowed on {path}", "status": 405}
        return 404, {"error": f"no such route: {path}", "status": 404}

    def _proxy(self, name: str) -> Proxy:
        if name not in self.proxies:
            raise ApiError(404, "proxy not found")
        return self.proxies[name]

    # -- server -------------------------------------------------------------------------------
    async def version(self, body):
        return 200, {"version": VERSION}

    async def reset(self, body):
        for proxy in self.proxies.values():
            await self._start(proxy)
            proxy.reset_toxics()
        return 204, None

    async def populate(self, body):
        items = _json(body, list)
        seen = set()
        for i, item in enumerate(items, 1):        # validate everything before changing anything
            if not isinstance(item, dict):
                raise _bad(f"proxy {i} must be a JSON object")
            _check_proxy_fields(item, f" at proxy {i}")
            if item["name"] in seen:
                raise _bad(f"duplicate proxy name {item['name']!r} at proxy {i}")
            seen.add(item["name"])
            self._addresses(item.get("listen", "127.0.0.1:0"), item["upstream"], f" at proxy {i}")
        result = []
        for item in items:
            listen = item.get("listen") or "127.0.0.1:0"
            old = self.proxies.get(item["name"])
            if old is not None and (old.upstream != item["upstream"] or old.listen != listen):
                await old.stop()
                del self.proxies[item["name"]]
                old = None
            if old is None:
                old = Proxy(item["name"], listen, item["upstream"])
                if item.get("enabled", True):
                    await self._start(old)     # a proxy that cannot listen is not added
                self.proxies[old.name] = old
            result.append(old.to_json())
        return 201, {"proxies": result}

    # -- proxies ------------------------------------------------------------------------------
    async def proxy_index(self, body):
        return 200, {name: p.to_json() for name, p in self.proxies.items()}

    async def proxy_create(self, body):
        data = _json(body, dict)
        _check_proxy_fields(data)
        listen = data.get("listen") or "127.0.0.1:0"
        self._addresses(listen, data["upstream"])
        if data["name"] in self.proxies:
            raise ApiError(409, "proxy already exists")
        proxy = Proxy(data["name"], listen, data["upstream"])
        if data.get("enabled", True):
            await self._start(proxy)
        self.proxies[proxy.name] = proxy
        return 201, proxy.to_json()

    async def proxy_show(self, body, name):
        return 200, self._proxy(name).to_json()

    async def proxy_update(self, body, name):
        proxy = self._proxy(name)
        data = _json(body, dict)
        listen = data.get("listen", proxy.listen)
        upstream = data.get("upstream", proxy.upstream)
        enabled = data.get("enabled", proxy.enabled)
        if not isinstance(enabled, bool):
            raise _bad("enabled must be true or false")
        self._addresses(listen, upstream)
        try:
            await proxy.update(listen, upstream, enabled)
        except OSError as exc:
            raise ApiError(500, f"listen tcp {proxy.listen}: {exc.strerror or exc}")
        return 200, proxy.to_json()

    async def proxy_delete(self, body, name):
        proxy = self._proxy(name)
        await proxy.stop()
        del self.proxies[name]
        return 204, None

    # -- toxics -------------------------------------------------------------------------------
    async def toxic_index(self, body, name):
        return 200, [t.to_json() for t in self._proxy(name).toxics]

    async def toxic_create(self, body, name):
        proxy = self._proxy(name)
        try:
            toxic = build_toxic(_json(body, dict))
        except ToxicError as exc:
            raise _bad(str(exc))
        if proxy.find_toxic(toxic.name) is not None:
            raise ApiError(409, "toxic already exists")
        proxy.set_toxic(toxic)
        return 200, toxic.to_json()

    async def toxic_show(self, body, name, toxic_name):
        toxic = self._proxy(name).find_toxic(toxic_name)
        if toxic is None:
            raise ApiError(404, "toxic not found")
        return 200, toxic.to_json()

    async def toxic_update(self, body, name, toxic_name):
        proxy = self._proxy(name)
        old = proxy.find_toxic(toxic_name)
        if old is None:
            raise ApiError(404, "toxic not found")
        try:
            new = updated_toxic(old, _json(body, dict))
        except ToxicError as exc:
            raise _bad(str(exc))
        proxy.set_toxic(new)
        return 200, new.to_json()

    async def toxic_delete(self, body, name, toxic_name):
        proxy = self._proxy(name)
        if proxy.find_toxic(toxic_name) is None:
            raise ApiError(404, "toxic not found")
        proxy.remove_toxic(toxic_name)
        return 204, None

    # -- helpers ------------------------------------------------------------------------------
    @staticmethod
    def _addresses(listen: Any, upstream: Any, where: str = "") -> None:
        try:
            parse_address(listen, "listen" + where)
            parse_address(upstream, "upstream" + where)
        except AddressError as exc:
            raise _bad(str(exc))

    @staticmethod
    async def _start(proxy: Proxy) -> None:
        try:
            await proxy.start()
        except OSError as exc:
            raise ApiError(500, f"listen tcp {proxy.listen}: {exc.strerror or exc}")

    async def shutdown(self) -> None:
        for proxy in self.proxies.values():
            await proxy.stop()
