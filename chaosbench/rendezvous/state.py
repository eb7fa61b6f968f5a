"""Read torch's DynamicRendezvous state (a pickle) without trusting it.

The state is whatever any etcd client wrote, so it is decoded with an unpickler that only builds
the handful of classes the state is made of, never arbitrary callables.
"""
from __future__ import annotations

import datetime as _dt
import io
import pickle
from dataclasses import dataclass

_ALLOWED = {
    ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "_RendezvousState"),
    ("torch.distributed.elastic.rendezvous.dynamic_rendezvous", "_NodeDesc"),
    ("datetime", "datetime"), ("datetime", "timezone"), ("datetime", "timedelta"),
    ("builtins", "set"), ("builtins", "frozenset"),
}


class _StateUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"rendezvous state refers to {module}.{name}, which is not allowed")
        return super().find_class(module, name)


@dataclass
class RendezvousSummary:
    round: int
    complete: bool
    closed: bool
    participants: list[str]
    wait_list: list[str]
    last_heartbeat: _dt.datetime | None   # newest heartbeat of any node (UTC)

    def heartbeat_age_s(self, now: _dt.datetime | None = None) -> float | None:
        if self.last_heartbeat is None:
            return None
        now = now or _dt.datetime.now(_dt.timezone.utc)
        return (now - self.last_heartbeat).total_seconds()


def decode_state(raw: bytes) -> RendezvousSummary:
    """Raises ValueError when the bytes are not a rendezvous state."""
    try:
        state = _StateUnpickler(io.BytesIO(raw)).load()
    except Exception as exc:
        raise ValueError(f"not a DynamicRendezvous state: {exc}") from exc
    beats = list(getattr(state, "last_heartbeats", {}).values())
    return RendezvousSummary(
        round=state.round, complete=state.complete, closed=state.closed,
        participants=sorted(str(n) for n in state.participants),
        wait_list=sorted(str(n) for n in state.wait_list),
        last_heartbeat=max(beats) if beats else None)
