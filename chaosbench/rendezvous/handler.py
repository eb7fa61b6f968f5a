"""torch's DynamicRendezvousHandler with a fresh worker store published in every round.

With the shared agent TCPStore (torch's default) two things go wrong when membership changes
(both seen here with torch 2.15, on c10d and etcd backends alike):

- rank 0 writes MASTER_ADDR/MASTER_PORT into the round's store only the first time it builds its
  bootstrap info; a node joining a later round waits for them under *that* round's prefix, while
  rank 0 waits for the newcomer's role info: both hang until the store timeout.
- workers key their gloo/NCCL bootstrap by their local restart count, which differs between an
  old node and a newcomer, so a newcomer can read a dead worker's address left in the long-lived
  store and fail to connect (pytorch/pytorch#135712); the group then fails and restarts once more.

So here rank 0 starts a new TCPStore server for every round (its workers of the previous round are
already stopped) and publishes its address in the round's store; every other rank reads it there.
"""
from __future__ import annotations

from torch.distributed.elastic.rendezvous.api import RendezvousInfo, RendezvousStoreInfo
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler


class RoundStoreRendezvousHandler(DynamicRendezvousHandler):
    def next_rendezvous(self) -> RendezvousInfo:
        server_before = self._shared_tcp_store_server
        info = super().next_rendezvous()
        if not self.use_agent_store:      # torch then builds fresh bootstrap info every round itself
            return info
        store = info.store
        if info.rank == 0:
            if self._shared_tcp_store_server is server_before:
                # torch kept last round's server: replace it (dropping the old one closes it).
                self._shared_tcp_store_server = self._create_tcp_store_server(self._this_node.addr, 0)
            boot = RendezvousStoreInfo(self._this_node.addr, self._shared_tcp_store_server.port)
            store.set(RendezvousStoreInfo.MASTER_ADDR_KEY, boot.master_addr.encode())
            store.set(RendezvousStoreInfo.MASTER_PORT_KEY, str(boot.master_port).encode())
        else:
            boot = RendezvousStoreInfo.build(info.rank, store, local_addr=self._this_node.addr)
        self._bootstrap_store_info = boot
        return RendezvousInfo(store, info.rank, info.world_size, boot)


def round_store(handler: DynamicRendezvousHandler) -> RoundStoreRendezvousHandler:
    """Turn the handler torch's create_handler built into ours (same state, one method differs);
    this keeps torch's own parsing of every rdzv-conf key instead of copying it."""
    handler.__class__ = RoundStoreRendezvousHandler
    return handler  # type: ignore[return-value]
