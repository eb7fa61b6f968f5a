"""torch's DynamicRendezvousHandler with the bootstrap address published in every round.

Why: with the shared agent TCPStore (torch's default), rank 0 writes MASTER_ADDR/MASTER_PORT into
the round's store only the first time it builds its bootstrap info, and other nodes reuse theirs.
When a new node joins in a later round, it waits for MASTER_ADDR under *that* round's prefix, which
nobody writes, while rank 0 waits for the newcomer's role info: both hang until the store timeout
(seen here with torch 2.15 on c10d and etcd backends alike). A node that keeps its cached info
while rank 0 moved to another host would dial a dead store. So here rank 0 republishes every round
and every other rank re-reads the round's address.
"""
from __future__ import annotations

from torch.distributed.elastic.rendezvous.api import RendezvousInfo, RendezvousStoreInfo
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler


class RepublishingRendezvousHandler(DynamicRendezvousHandler):
    def next_rendezvous(self) -> RendezvousInfo:
        info = super().next_rendezvous()
        if not self.use_agent_store:      # torch then builds fresh bootstrap info every round itself
            return info
        store = info.store
        if info.rank == 0:
            boot = info.bootstrap_store_info
            store.set(RendezvousStoreInfo.MASTER_ADDR_KEY, boot.master_addr.encode())
            store.set(RendezvousStoreInfo.MASTER_PORT_KEY, str(boot.master_port).encode())
            return info
        boot = RendezvousStoreInfo.build(info.rank, store, local_addr=self._this_node.addr)
        self._bootstrap_store_info = boot
        return RendezvousInfo(store, info.rank, info.world_size, boot)


def republishing(handler: DynamicRendezvousHandler) -> RepublishingRendezvousHandler:
    """Turn the handler torch's create_handler built into ours (same state, one method differs);
    this keeps torch's own parsing of every rdzv-conf key instead of copying it."""
    handler.__class__ = RepublishingRendezvousHandler
    return handler  # type: ignore[return-value]
