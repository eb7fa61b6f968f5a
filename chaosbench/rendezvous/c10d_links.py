"""torchrun's ``c10d-links`` rendezvous backend: torch's own c10d rendezvous (a TCPStore hosted by one
agent, no etcd) plus peer links, so that a crashed node leaves the rendezvous as soon as its agent's
connections close instead of after torch's keep-alive expiry.

    torchrun --rdzv-backend=c10d-links --rdzv-endpoint=HOST:29400 --rdzv-id=RUN --nnodes=2:3 \\
             --rdzv-conf=is_host=...,keep_alive_interval=1,keep_alive_max_attempt=3,last_call_timeout=1 train.py

Every rdzv-conf key of torch's c10d backend works unchanged; ``link_host`` sets the address peers
reach this agent's link port at (default: the interface that routes to the store host). What it
changes is in link_liveness.py and watched.py; ``--rdzv-backend=c10d`` is the same without them.
"""
from __future__ import annotations

from typing import Callable

from torch.distributed.elastic.rendezvous.api import RendezvousHandler, RendezvousParameters

DEFAULT_PORT = 29400


def create_c10d_links_handler(params: RendezvousParameters) -> RendezvousHandler:
    # Imported here: torch loads this module while importing its rendezvous package (see etcd_v3.py).
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    from chaosbench.rendezvous.etcd_v3 import _log_like_torch
    from chaosbench.rendezvous.handler import round_store
    from chaosbench.rendezvous.link_liveness import LinkLiveness
    from chaosbench.rendezvous.links import advertised_host
    from chaosbench.rendezvous.watched import with_liveness

    _log_like_torch()
    backend, store = create_backend(params)
    handler = round_store(create_handler(store, backend, params), params)
    handler._backend_name = params.backend   # torch checks the handler names the backend it was asked for
    host = params.get("link_host") or advertised_host(*parse_rendezvous_endpoint(params.endpoint, DEFAULT_PORT))
    return with_liveness(handler, LinkLiveness(store, repr(handler._this_node), host))


def handler_creator() -> Callable[[RendezvousParameters], RendezvousHandler]:
    """The ``torchrun.handlers`` entry point (torch calls it with no arguments)."""
    return create_c10d_links_handler
