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

``--rdzv-conf rejoin_at_once=1``: a *re*-rendezvous starts at once. torch sleeps a random 0-0.3 s
before a rendezvous while the state's round is 0, to spread the agents of a job starting together;
but the round number only moves on when every participant has left, so the first re-rendezvous after
a node loss (the survivors of round 0) sleeps it too: 0.15 s on average, a third of the tuned
trainer's local node-loss recovery (docs/recovery.md, "In-round time"). An agent's first rendezvous
keeps the jitter; rounds, ranks and restarts are the same either way.
"""
from __future__ import annotations

import contextlib
import logging
import threading

from torch.distributed.elastic.rendezvous import dynamic_rendezvous
from torch.distributed.elastic.rendezvous.api import RendezvousInfo, RendezvousParameters, RendezvousStoreInfo
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

log = logging.getLogger(__name__)
FIRST_ROUND_JITTER = (0, 0.3)   # torch's next_rendezvous: `if state.round == 0: _delay(seconds=(0, 0.3))`
_skipping = threading.local()   # per thread: the keep-alive thread's own delays are never touched


def _delay(seconds) -> None:
    """torch's `_delay`, except the first-round jitter of a re-rendezvous that asked to skip it."""
    if getattr(_skipping, "jitter", False) and seconds == FIRST_ROUND_JITTER:
        _skipping.jitter = False
        log.info("re-rendezvous: torch's first-round jitter (0-0.3 s) skipped (rejoin_at_once)")
        return
    _torch_delay(seconds=seconds)


_torch_delay = getattr(dynamic_rendezvous._delay, "torch_delay", dynamic_rendezvous._delay)   # once, if reloaded
_delay.torch_delay = _torch_delay  # type: ignore[attr-defined]
dynamic_rendezvous._delay = _delay


@contextlib.contextmanager
def _without_jitter(skip: bool):
    _skipping.jitter = skip
    try:
        yield
    finally:
        _skipping.jitter = False


class RoundStoreRendezvousHandler(DynamicRendezvousHandler):
    rejoin_at_once = False     # rdzv-conf rejoin_at_once=1 (module doc)
    rounds_joined = 0          # rendezvous this agent completed

    def next_rendezvous(self) -> RendezvousInfo:
        server_before = self._shared_tcp_store_server
        with _without_jitter(self.rejoin_at_once and self.rounds_joined > 0):
            info = super().next_rendezvous()
        self.rounds_joined += 1
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


def round_store(handler: DynamicRendezvousHandler, params: RendezvousParameters | None = None
                ) -> RoundStoreRendezvousHandler:
    """Turn the handler torch's create_handler built into ours (same state, one method differs);
    this keeps torch's own parsing of every rdzv-conf key instead of copying it. `params`: read
    `rejoin_at_once` from them (torch's own boolean parsing: 1/true/yes)."""
    handler.__class__ = RoundStoreRendezvousHandler
    handler.rejoin_at_once = bool(params and params.get_as_bool("rejoin_at_once", False))  # type: ignore[attr-defined]
    return handler  # type: ignore[return-value]
