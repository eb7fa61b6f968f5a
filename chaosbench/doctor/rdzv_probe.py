"""Live rendezvous state: who has joined a c10d round, read from the rendezvous store itself.

torchrun's c10d backend keeps the state under `torch.rendezvous.<run_id>` as base64 of a pickled
`_RendezvousState`. Only the classes that state is made of are allowed to unpickle.
"""
from __future__ import annotations

import base64
import io
import pickle
from datetime import timedelta

ALLOWED = {
    ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "_RendezvousState"),
    ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "_NodeDesc"),
    ("datetime", "datetime"), ("datetime", "timedelta"), ("datetime", "timezone"), ("builtins", "set"), ("builtins", "dict"),
}


class _Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name} from the rendezvous store")
        return super().find_class(module, name)


def c10d_state(host: str, port: int, run_id: str, timeout_s: float = 3.0) -> dict:
    """{'round', 'complete', 'participants': [...], 'wait_list': [...], 'last_heartbeats': {node: ts}}.

    Raises OSError/RuntimeError if the store cannot be reached, LookupError if no state exists for run_id."""
    from torch.distributed import TCPStore
    store = TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    key = "torch.rendezvous." + run_id
    if not store.check([key]):
        raise LookupError(f"no rendezvous state for run id {run_id!r} in the store at {host}:{port}")
    raw = store.get(key)
    state = _Restricted(io.BytesIO(base64.b64decode(raw))).load()

    def node(n):
        return f"{n.addr}_{n.pid}_{n.local_id}"

    return {
        "round": state.round,
        "complete": state.complete,
        "participants": sorted(node(n) for n in state.participants),
        "wait_list": sorted(node(n) for n in state.wait_list),
        "redundancy_list": sorted(node(n) for n in getattr(state, "redundancy_list", set())),
        "last_heartbeats": {node(n): t.timestamp() for n, t in state.last_heartbeats.items()},
        "deadline": state.deadline.timestamp() if state.deadline else None,
    }
