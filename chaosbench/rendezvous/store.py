"""A c10d Store on etcd v3, for process-group bootstrap (rank 0 publishes its address, others read).

Keys live under the run's prefix and carry the run's lease, so ``chaosbench.etcd clean`` and lease
expiry remove them together with the rendezvous state. Waiting polls with a short backoff rather
than using etcd3's watch threads: the store is read a handful of times per rendezvous round.
"""
from __future__ import annotations

import datetime
import time

from torch.distributed import Store

from chaosbench.rendezvous.connection import EtcdV3Connection


def _b(value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (list, bytearray)):   # pybind may hand us a list of ints
        return bytes(value)
    raise TypeError(f"store values must be str or bytes, got {type(value).__name__}")


class EtcdV3Store(Store):
    def __init__(self, conn: EtcdV3Connection, prefix: str, timeout: datetime.timedelta | None = None):
        super().__init__()  # required by the pybind trampoline
        self._conn = conn
        self._prefix = prefix if prefix.endswith("/") else prefix + "/"
        if timeout is not None:
            self.set_timeout(timeout)

    def _k(self, key: str) -> str:
        return self._prefix + key

    def set(self, key, value) -> None:
        client = self._conn.client
        self._conn.with_lease(f"setting store key {key!r}",
                              lambda lease: client.put(self._k(key), _b(value), lease=lease))

    def get(self, key) -> bytes:
        values = self._wait_get([key], None)
        if values is None:
            raise LookupError(f"Key {key} not found in EtcdV3Store (waited {self.timeout})")
        return values[0]

    def add(self, key, num: int) -> int:
        client, tx, full = self._conn.client, self._conn.client.transactions, self._k(key)
        while True:
            value, meta = self._conn.call(f"reading store key {key!r}", lambda: client.get(full))
            new = (int(value) if meta is not None else 0) + int(num)
            compare = [tx.create(full) == 0] if meta is None else [tx.mod(full) == meta.mod_revision]
            ok, _ = self._conn.with_lease(
                f"adding to store key {key!r}",
                lambda lease: client.transaction(compare=compare, success=[tx.put(full, str(new), lease=lease)],
                                                 failure=[]))
            if ok:
                return new

    def compare_set(self, key, expected_value, desired_value) -> bytes:
        client, tx, full = self._conn.client, self._conn.client.transactions, self._k(key)
        expected, desired = _b(expected_value), _b(desired_value)
        # c10d semantics: an empty expected value means "set if the key does not exist".
        compare = [tx.create(full) == 0] if expected == b"" else [tx.value(full) == expected]
        ok, responses = self._conn.with_lease(
            f"compare-and-set of store key {key!r}",
            lambda lease: client.transaction(compare=compare, success=[tx.put(full, desired, lease=lease)],
                                             failure=[tx.get(full)]))
        if ok:
            return desired
        kvs = responses[0]
        return kvs[0][0] if kvs else expected

    def wait(self, keys, override_timeout: datetime.timedelta | None = None) -> None:
        if self._wait_get(list(keys), override_timeout) is None:
            raise LookupError(f"Timeout while waiting for keys {list(keys)} in EtcdV3Store")

    def check(self, keys) -> bool:
        return self._get_all(list(keys)) is not None

    def delete_key(self, key) -> bool:
        return bool(self._conn.call(f"deleting store key {key!r}",
                                    lambda: self._conn.client.delete(self._k(key))))

    def num_keys(self) -> int:
        return len(list(self._conn.call("counting store keys",
                                        lambda: self._conn.client.get_prefix(self._prefix, keys_only=True))))

    def _get_all(self, keys: list[str]) -> list[bytes] | None:
        client = self._conn.client
        values = []
        for key in keys:
            value, meta = self._conn.call(f"reading store key {key!r}", lambda k=key: client.get(self._k(k)))
            if meta is None:
                return None
            values.append(value)
        return values

    def _wait_get(self, keys: list[str], override_timeout) -> list[bytes] | None:
        timeout = self.timeout if override_timeout is None else override_timeout
        deadline = time.monotonic() + timeout.total_seconds()
        delay = 0.01
        while True:
            values = self._get_all(keys)
            if values is not None:
                return values
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.05)   # inside every recovery (rank assignment): 20 reads/s at most
