"""An etcd v3 connection for the rendezvous: bounded retries, clear errors, one refreshed lease.

Why retries: torchrun's agent polls the rendezvous state every monitor interval and dies on the
first exception, so a restart of etcd (a second or two) would kill every agent. Transient
connection errors are retried for ``retry_timeout`` seconds; after that the caller gets a
``RendezvousConnectionError`` naming the endpoint and what was being done.

Why a lease: every key we write is attached to a lease of ``ttl`` seconds, so the state of a run
whose nodes all died expires by itself instead of confusing a later run. Leases are re-granted
(not kept alive by a stream) once a third of the TTL has passed, so a key written by a live node is
always at least 2/3 TTL from expiry and a restarted or wiped etcd simply gets a new lease.
"""
from __future__ import annotations

import logging
import os
import random
import threading
import time
from typing import Callable, TypeVar

from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError

log = logging.getLogger(__name__)
T = TypeVar("T")

# Shorter gRPC reconnect backoff than the default (1 s growing to 120 s): after an etcd restart we
# want to be back within a second, not after minutes of exponential backoff.
_GRPC_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                 ("grpc.max_reconnect_backoff_ms", 1000)]


def import_etcd3():
    """etcd3 0.12 ships protobuf code that only loads with the pure-python protobuf runtime."""
    os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"
    try:
        import etcd3  # noqa: PLC0415
    except Exception as exc:  # TypeError from protobuf when the C runtime was loaded first
        raise ImportError(
            "cannot import etcd3; it needs PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python set before "
            f"protobuf is first imported (set it in the environment): {exc}") from exc
    return etcd3


class EtcdV3Connection:
    def __init__(self, host: str, port: int, *, rpc_timeout: float = 5.0, retry_timeout: float = 30.0,
                 ttl: int = 7200):
        if rpc_timeout <= 0 or retry_timeout < 0 or ttl <= 0:
            raise ValueError(f"invalid etcd-v3 settings: rpc_timeout={rpc_timeout} (> 0), "
                             f"retry_timeout={retry_timeout} (>= 0), ttl={ttl} (> 0)")
        self.etcd3 = import_etcd3()
        self.endpoint = f"{host}:{port}"
        self.rpc_timeout = rpc_timeout
        self.retry_timeout = retry_timeout
        self.ttl = int(ttl)
        self.client = self.etcd3.client(host=host, port=port, timeout=rpc_timeout,
                                        grpc_options=_GRPC_OPTIONS)
        self._lease_lock = threading.Lock()
        self._lease_id: int | None = None
        self._lease_granted = 0.0

    # -- retries -----------------------------------------------------------------------------
    def _transient(self, exc: BaseException) -> bool:
        import grpc  # noqa: PLC0415

        e = self.etcd3.exceptions
        if isinstance(exc, (e.ConnectionFailedError, e.ConnectionTimeoutError)):
            return True
        return isinstance(exc, grpc.RpcError) and exc.code() in (
            grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN)

    def call(self, what: str, fn: Callable[[], T], retry_timeout: float | None = None) -> T:
        window = self.retry_timeout if retry_timeout is None else retry_timeout
        deadline = time.monotonic() + window
        delay = 0.1
        while True:
            try:
                return fn()
            except Exception as exc:
                if not self._transient(exc):
                    raise
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RendezvousConnectionError(
                        f"etcd at {self.endpoint} unreachable for {window:g}s while {what} "
                        f"({type(exc).__name__}: {exc}); is etcd running and is the "
                        f"--rdzv-endpoint right? (rdzv-conf retry_timeout sets how long to retry)"
                    ) from exc
                log.warning("etcd at %s: %s failed (%s), retrying", self.endpoint, what, exc)
                time.sleep(min(remaining, delay * random.uniform(0.8, 1.2)))
                delay = min(delay * 2, 1.0)

    def check(self, retry_timeout: float | None = None) -> None:
        """Fail fast with a clear message when etcd cannot be reached at all."""
        self.call("checking that etcd answers", self.client.status, retry_timeout)

    # -- lease -------------------------------------------------------------------------------
    def lease_id(self) -> int:
        with self._lease_lock:
            if self._lease_id is None or time.monotonic() - self._lease_granted > self.ttl / 3:
                lease = self.call("granting a lease", lambda: self.client.lease(self.ttl))
                self._lease_id, self._lease_granted = lease.id, time.monotonic()
            return self._lease_id

    def forget_lease(self) -> None:
        """After 'lease not found' (etcd wiped, or the lease expired while etcd was down)."""
        with self._lease_lock:
            self._lease_id = None

    @staticmethod
    def is_lease_not_found(exc: BaseException) -> bool:
        import grpc  # noqa: PLC0415

        return isinstance(exc, grpc.RpcError) and exc.code() == grpc.StatusCode.NOT_FOUND and \
            "lease" in (exc.details() or "")

    def with_lease(self, what: str, fn: Callable[[int], T]) -> T:
        """Run ``fn(lease_id)``; if etcd lost our lease, take a fresh one and run it once more."""
        try:
            return self.call(what, lambda: fn(self.lease_id()))
        except Exception as exc:
            if not self.is_lease_not_found(exc):
                raise
            self.forget_lease()
            return self.call(what, lambda: fn(self.lease_id()))

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # closing must never mask the real error
            pass
