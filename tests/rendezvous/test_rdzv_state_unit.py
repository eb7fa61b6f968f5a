"""Unit tests: rendezvous state decoding refuses foreign pickles; run ids are checked."""
import os
import pickle

import pytest
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

from chaosbench.rendezvous.layout import v3_state_key
from chaosbench.rendezvous.state import decode_state


def test_decodes_torch_state():
    state = _RendezvousState()
    state.round, state.closed = 3, True
    node = _NodeDesc("host", 1, 0)
    state.participants[node] = 0
    import datetime
    state.last_heartbeats[node] = datetime.datetime.now(datetime.timezone.utc)
    s = decode_state(pickle.dumps(state))
    assert (s.round, s.closed, s.participants) == (3, True, ["host_1_0"])
    assert 0 <= s.heartbeat_age_s() < 5


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_refuses_arbitrary_pickles():
    with pytest.raises(ValueError, match="not allowed"):
        decode_state(pickle.dumps(_Evil()))
    with pytest.raises(ValueError):
        decode_state(b"garbage")


def test_run_id_must_be_a_path_segment():
    assert v3_state_key("r1") == "/chaosbench/rdzv/r1/state"
    for bad in ("", "a/b"):
        with pytest.raises(ValueError, match="run id"):
            v3_state_key(bad)
