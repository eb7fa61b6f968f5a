"""The DynamicRendezvous state in etcd v3, with compare-and-swap on the key's mod_revision.

The fencing token torch hands back to ``set_state`` is the mod_revision we read; a write succeeds
only if the key still has that revision (or, with no token, does not exist yet). Every write
re-reads the key in the same transaction, so the caller always gets the state that won.
"""
from __future__ import annotations

from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousBackend, Token

from chaosbench.rendezvous.connection import EtcdV3Connection
from chaosbench.rendezvous.layout import v3_state_key


class EtcdV3RendezvousBackend(RendezvousBackend):
    def __init__(self, conn: EtcdV3Connection, run_id: str, key_prefix: str | None = None):
        self._conn = conn
        self._key = v3_state_key(run_id, key_prefix) if key_prefix else v3_state_key(run_id)

    @property
    def name(self) -> str:
        return "etcd-v3"

    @property
    def connection(self) -> EtcdV3Connection:
        return self._conn

    @property
    def key(self) -> str:
        return self._key

    def get_state(self) -> tuple[bytes, Token] | None:
        value, meta = self._conn.call("reading the rendezvous state", lambda: self._conn.client.get(self._key))
        if meta is None:
            return None
        return value, meta.mod_revision

    def set_state(self, state: bytes, token: Token | None = None) -> tuple[bytes, Token, bool] | None:
        client = self._conn.client
        tx = client.transactions
        if token is None:
            compare = [tx.create(self._key) == 0]      # only if nobody created it yet
        else:
            try:
                revision = int(token)
            except (TypeError, ValueError):
                # A token we never handed out cannot match; answer with what is there.
                current = self.get_state()
                return None if current is None else (*current, False)
            compare = [tx.mod(self._key) == revision]

        def txn(lease_id: int):
            return client.transaction(compare=compare,
                                      success=[tx.put(self._key, state, lease=lease_id), tx.get(self._key)],
                                      failure=[tx.get(self._key)])

        succeeded, responses = self._conn.with_lease("writing the rendezvous state", txn)
        kvs = responses[-1]
        if not kvs:                                   # CAS lost against a delete: nothing there
            return None
        value, meta = kvs[0]
        return value, meta.mod_revision, bool(succeeded)
