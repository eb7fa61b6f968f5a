"""A TCP fault proxy speaking Toxiproxy 2.x's HTTP API, and a client for any such server."""
from .client import ProxyAPIError, ProxyClient, ProxyInfo, ToxicInfo
from .server import ProxyServer

__all__ = ["ProxyServer", "ProxyClient", "ProxyAPIError", "ProxyInfo", "ToxicInfo"]
