"""torchrun's ``etcd-v3`` rendezvous backend: torch's DynamicRendezvousHandler on etcd's v3 API.

    torchrun --rdzv-backend=etcd-v3 --rdzv-endpoint=HOST:PORT --rdzv-id=RUN --nnodes=1:2 \
             --rdzv-conf=join_timeout=60,last_call_timeout=2,keep_alive_interval=1,... train.py

torchrun finds it through the ``torchrun.handlers`` entry point, which torch loads and *calls with
no arguments*; the result must be a creator ``(RendezvousParameters) -> RendezvousHandler``. Hence
``handler_creator`` below returns ``create_etcd_v3_handler``.

rdzv-conf keys (besides torch's own join_timeout, last_call_timeout, close_timeout, heartbeat,
keep_alive_interval, keep_alive_max_attempt, cas_backoff_max_seconds):
  ttl            seconds the state and store keys outlive their last writer (default 7200)
  rpc_timeout    seconds one etcd call may take before it counts as failed (default 5)
  retry_timeout  seconds transient connection errors are retried, e.g. across an etcd restart (30)
  connect_timeout seconds to wait for etcd when the handler is created (default 10)
  key_prefix     where keys live (default /chaosbench/rdzv; see chaosbench.rendezvous.layout)
  store_timeout  seconds a store get/wait may block (default 300)
  liveness_ttl   seconds of the lease behind each node's liveness key (default 2; whole seconds, etcd
                 raises it to its minimum); 0 turns liveness off (torch's polling only). See
                 chaosbench.rendezvous.watched for what it changes.
  liveness_links 1 (default): each agent holds a TCP connection to every other agent and revokes the
                 lease of a peer whose connection closes, so a crash is known at once instead of
                 after the lease TTL (chaosbench.rendezvous.links); 0: the lease alone
  link_host      the address peers reach this agent's link port at (default: the address of the
                 interface that routes to etcd)
"""
from __future__ import annotations

import datetime
from typing import Callable

from torch.distributed.elastic.rendezvous.api import RendezvousHandler, RendezvousParameters
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from chaosbench.rendezvous.layout import DEFAULT_V3_PREFIX, check_run_id, v3_run_prefix, v3_store_prefix

DEFAULT_PORT = 2379


def _float(params: RendezvousParameters, key: str, default: float) -> float:
    raw = params.get(key, default)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"--rdzv-conf {key}={raw!r} is not a number; give seconds, e.g. {key}={default}") from None
    if value < 0:
        raise ValueError(f"--rdzv-conf {key}={raw!r} must not be negative")
    return value


def create_backend(params: RendezvousParameters):
    """(EtcdV3RendezvousBackend, EtcdV3Store) for the parameters torchrun parsed."""
    # Imported here, not at the top: torch loads this module while importing its rendezvous
    # package, and these modules import from that package (a cycle if done at import time).
    from chaosbench.rendezvous.backend import EtcdV3RendezvousBackend
    from chaosbench.rendezvous.connection import EtcdV3Connection
    from chaosbench.rendezvous.store import EtcdV3Store

    if not params.endpoint:
        raise ValueError("the etcd-v3 rendezvous needs --rdzv-endpoint=HOST:PORT (etcd's client port)")
    run_id = check_run_id(params.run_id)
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=DEFAULT_PORT)
    conn = EtcdV3Connection(host, port, rpc_timeout=_float(params, "rpc_timeout", 5.0),
                            retry_timeout=_float(params, "retry_timeout", 30.0),
                            ttl=int(_float(params, "ttl", 7200)))
    try:
        conn.check(retry_timeout=_float(params, "connect_timeout", 10.0))
    except BaseException:
        conn.close()
        raise
    prefix = params.get("key_prefix", DEFAULT_V3_PREFIX)
    backend = EtcdV3RendezvousBackend(conn, run_id, prefix)
    store = EtcdV3Store(conn, v3_store_prefix(run_id, prefix),
                        timeout=datetime.timedelta(seconds=_float(params, "store_timeout", 300.0)))
    return backend, store


def _log_like_torch() -> None:
    """torchrun sets the level of torch's own loggers from $LOGLEVEL; ours say at INFO what liveness
    decided (a link lost, a lease revoked, a worker group restarted for a dead node): evidence in
    the agent's log next to torch's rendezvous lines."""
    import logging
    import os

    ours = logging.getLogger("chaosbench.rendezvous")
    if ours.level == logging.NOTSET and os.environ.get("LOGLEVEL"):
        ours.setLevel(os.environ["LOGLEVEL"])
        if not logging.getLogger().handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
            ours.addHandler(handler)


def create_etcd_v3_handler(params: RendezvousParameters) -> RendezvousHandler:
    from chaosbench.rendezvous.handler import round_store
    from chaosbench.rendezvous.liveness import Liveness
    from chaosbench.rendezvous.watched import with_liveness

    ttl = _float(params, "liveness_ttl", 2)
    if ttl != int(ttl):
        raise ValueError(f"--rdzv-conf liveness_ttl={params.get('liveness_ttl')!r}: etcd leases have whole "
                         f"seconds; give e.g. liveness_ttl=2, or 0 to turn liveness off")
    _log_like_torch()
    backend, store = create_backend(params)
    handler = round_store(create_handler(store, backend, params), params)
    if not ttl:
        return handler
    run_prefix = v3_run_prefix(params.run_id, params.get("key_prefix", DEFAULT_V3_PREFIX))
    links_host = None
    if _float(params, "liveness_links", 1):
        from chaosbench.rendezvous.links import advertised_host
        host, port = parse_rendezvous_endpoint(params.endpoint, default_port=DEFAULT_PORT)
        links_host = params.get("link_host") or advertised_host(host, port)
    liveness = Liveness(backend.connection, run_prefix, backend.key, repr(handler._this_node), int(ttl),
                        links_host=links_host)
    return with_liveness(handler, liveness)


def handler_creator() -> Callable[[RendezvousParameters], RendezvousHandler]:
    """The ``torchrun.handlers`` entry point (torch calls it with no arguments)."""
    return create_etcd_v3_handler
