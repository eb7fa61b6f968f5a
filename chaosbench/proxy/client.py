"""A thin typed client for any server speaking Toxiproxy 2.x's HTTP API (ours or the real one).

    c = ProxyClient("http://127.0.0.1:8474")
    p = c.create_proxy("etcd", upstream="127.0.0.1:2379", listen="0.0.0.0:12379")
    c.add_toxic("etcd", "latency", {"latency": 200, "jitter": 20}, stream="downstream")
    c.disable("etcd"); c.enable("etcd"); c.reset()
    with ProxyClient(url) as c: ...        # closes its HTTP session on the way out

The harness's one Toxiproxy client: the faults, the backends' route set-up and the tests all speak
through it.

Updates use POST, which every 2.x server accepts (PATCH only exists in newer ones).
Every non-2xx answer raises ProxyAPIError carrying the status and the server's message.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import requests


class ProxyAPIError(RuntimeError):
    def __init__(self, status: int, message: str, method: str, url: str):
        super().__init__(f"{method} {url} -> {status}: {message}")
        self.status, self.message, self.method, self.url = status, message, method, url


@dataclass
class ToxicInfo:
    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict) -> "ToxicInfo":
        return cls(d["name"], d["type"], d.get("stream", "downstream"),
                   float(d.get("toxicity", 1.0)), dict(d.get("attributes") or {}))


@dataclass
class ProxyInfo:
    name: str
    listen: str
    upstream: str
    enabled: bool
    toxics: list[ToxicInfo] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @classmethod
    def from_json(cls, d: dict) -> "ProxyInfo":
        return cls(d["name"], d["listen"], d["upstream"], bool(d["enabled"]),
                   [ToxicInfo.from_json(t) for t in d.get("toxics") or []])


class ProxyClient:
    def __init__(self, base_url: str, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._http = requests.Session()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        url = self.base_url + path
        try:
            resp = self._http.request(method, url, json=body, timeout=self.timeout)
        except requests.RequestException as exc:
            raise ProxyAPIError(0, f"cannot reach the proxy API: {exc}", method, url) from exc
        if resp.status_code >= 300:
            try:
                message = resp.json().get("error", resp.text)
            except ValueError:
                message = resp.text.strip()
            raise ProxyAPIError(resp.status_code, message, method, url)
        if resp.status_code == 204 or not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            return resp.text.strip()

    # -- server -------------------------------------------------------------------------------
    def version(self) -> str:
        data = self._call("GET", "/version")
        return data.get("version", "") if isinstance(data, dict) else str(data)

    def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        self._call("POST", "/reset")

    def populate(self, proxies: list[dict]) -> list[ProxyInfo]:
        data = self._call("POST", "/populate", proxies)
        items = data.get("proxies", []) if isinstance(data, dict) else data
        return [ProxyInfo.from_json(p) for p in items or []]

    # -- proxies ------------------------------------------------------------------------------
    def proxies(self) -> dict[str, ProxyInfo]:
        return {n: ProxyInfo.from_json(p) for n, p in self._call("GET", "/proxies").items()}

    def create_proxy(self, name: str, upstream: str, listen: str = "127.0.0.1:0",
                     enabled: bool = True) -> ProxyInfo:
        body = {"name": name, "upstream": upstream, "listen": listen, "enabled": enabled}
        return ProxyInfo.from_json(self._call("POST", "/proxies", body))

    def get(self, name: str) -> ProxyInfo:
        return ProxyInfo.from_json(self._call("GET", f"/proxies/{name}"))

    def update(self, name: str, *, listen: str | None = None, upstream: str | None = None,
               enabled: bool | None = None) -> ProxyInfo:
        body = {k: v for k, v in (("listen", listen), ("upstream", upstream),
                                  ("enabled", enabled)) if v is not None}
        return ProxyInfo.from_json(self._call("POST", f"/proxies/{name}", body))

    def enable(self, name: str) -> ProxyInfo:
        return self.update(name, enabled=True)

    def disable(self, name: str) -> ProxyInfo:
        """Drop the proxy's connections and refuse new ones until enabled."""
        return self.update(name, enabled=False)

    def delete(self, name: str) -> None:
        self._call("DELETE", f"/proxies/{name}")

    # -- toxics -------------------------------------------------------------------------------
    def toxics(self, proxy: str) -> list[ToxicInfo]:
        return [ToxicInfo.from_json(t) for t in self._call("GET", f"/proxies/{proxy}/toxics")]

    def get_toxic(self, proxy: str, toxic: str) -> ToxicInfo:
        return ToxicInfo.from_json(self._call("GET", f"/proxies/{proxy}/toxics/{toxic}"))

    def add_toxic(self, proxy: str, type: str, attributes: dict[str, Any] | None = None, *,
                  name: str | None = None, stream: str = "downstream",
                  toxicity: float = 1.0) -> ToxicInfo:
        body = {"type": type, "stream": stream, "toxicity": toxicity,
                "attributes": attributes or {}}
        if name:
            body["name"] = name
        return ToxicInfo.from_json(self._call("POST", f"/proxies/{proxy}/toxics", body))

    def update_toxic(self, proxy: str, toxic: str, attributes: dict[str, Any] | None = None, *,
                     toxicity: float | None = None) -> ToxicInfo:
        body: dict[str, Any] = {"attributes": attributes or {}}
        if toxicity is not None:
            body["toxicity"] = toxicity
        return ToxicInfo.from_json(self._call("POST", f"/proxies/{proxy}/toxics/{toxic}", body))

    def remove_toxic(self, proxy: str, toxic: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{toxic}")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "ProxyClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
