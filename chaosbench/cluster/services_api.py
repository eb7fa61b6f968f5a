"""Health waits and route set-up shared by the backends, spoken over HTTP only.

The harness drives the proxy through Toxiproxy's HTTP API (chaosbench.proxy.client, its one
client), so ours and a real Toxiproxy are interchangeable; etcd and S3 are probed on their own
health endpoints.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from chaosbench.cluster.errors import ClusterError
from chaosbench.proxy.client import ProxyAPIError, ProxyClient


def http(method: str, url: str, body: object | None = None, timeout: float = 10.0) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def wait_until(what: str, probe, timeout: float, log_hint: str = "") -> None:
    """Poll `probe()` (truthy = ready) until `timeout`; the last error goes into the message."""
    deadline, last = time.monotonic() + timeout, "no answer yet"
    while time.monotonic() < deadline:
        try:
            if probe():
                return
            last = "not ready"
        except (OSError, urllib.error.URLError, ValueError, ProxyAPIError) as exc:
            last = str(exc)
        time.sleep(0.05)   # a local HTTP probe; at 0.2 s the go signal waited ~0.3 s past a ready S3 (its log)
    raise ClusterError(f"{what} not ready after {timeout:.0f}s ({last}){log_hint}")


def etcd_ready(url: str) -> bool:
    status, body = http("GET", f"{url}/health")
    return status == 200 and '"true"' in body


def s3_ready(url: str) -> bool:
    status, body = http("GET", f"{url}/_chaos/health")
    return status == 200 and json.loads(body).get("ok") is True


def proxy_ready(api: str) -> bool:
    """True once the API answers; an unreachable or failing API raises ProxyAPIError (wait_until keeps it)."""
    with ProxyClient(api, timeout=10.0) as proxy:
        proxy.version()
    return True


def create_routes(api: str, routes: dict[str, tuple[str, str]]) -> None:
    """routes: name -> (listen, upstream). Replaces existing routes of the same name (after a proxy restart)."""
    with ProxyClient(api, timeout=10.0) as proxy:
        for name, (listen, upstream) in routes.items():
            try:
                proxy.delete(name)
            except ProxyAPIError as exc:
                if exc.status != 404:   # 404: no such route yet, the usual case
                    raise ClusterError(f"proxy at {api}: removing route {name}: {exc}") from exc
            try:
                proxy.create_proxy(name, upstream=upstream, listen=listen)
            except ProxyAPIError as exc:
                raise ClusterError(f"proxy at {api}: creating route {name} ({listen} -> {upstream}) "
                                   f"answered {exc.status}: {exc.message[:300]}") from exc
