"""Toxiproxy HTTP API calls the link faults need (works with chaosbench's proxy and a real Toxiproxy)."""
from __future__ import annotations

from typing import Any

import requests

from chaosbench.cluster.base import ClusterError


class ProxyControl:
    def __init__(self, base_url: str, timeout_s: float = 5.0):
        self.base = base_url.rstrip("/")
        self.timeout = timeout_s

    def _call(self, method: str, path: str, body: dict | None = None) -> None:
        try:
            r = requests.request(method, self.base + path, json=body, timeout=self.timeout)
        except requests.RequestException as e:
            raise ClusterError(f"fault proxy API {self.base} unreachable: {e}") from e
        if r.status_code >= 400:
            raise ClusterError(f"fault proxy API {method} {path} -> {r.status_code}: {r.text.strip()[:200]}")

    def add_toxic(self, proxy: str, name: str, type_: str, stream: str, toxicity: float,
                  attributes: dict[str, Any]) -> None:
        self._call("POST", f"/proxies/{proxy}/toxics", {"name": name, "type": type_, "stream": stream,
                                                        "toxicity": toxicity, "attributes": attributes})

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def set_enabled(self, proxy: str, enabled: bool) -> None:
        self._call("POST", f"/proxies/{proxy}", {"enabled": enabled})


def proxy_client(cluster) -> ProxyControl:
    return ProxyControl(cluster.proxy_api)
