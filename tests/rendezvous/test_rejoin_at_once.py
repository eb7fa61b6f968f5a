"""rdzv-conf rejoin_at_once: the survivors' re-rendezvous skips torch's first-round jitter (handler.py).

torch sleeps a random 0-0.3 s before a rendezvous while the state's round is 0, and the round only
moves on once every participant has left: the first re-rendezvous after a node loss sleeps it too.
"""
from __future__ import annotations

import inspect
import threading
import time

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters, dynamic_rendezvous

from chaosbench.rendezvous import handler as round_handler
from chaosbench.rendezvous.etcd_v3 import create_etcd_v3_handler
from chaosbench.services.etcd_server import EtcdServer


def test_torch_still_jitters_a_round_0_rendezvous_the_way_the_skip_expects():
    src = inspect.getsource(dynamic_rendezvous.DynamicRendezvousHandler.next_rendezvous)
    assert "state.round == 0" in src and f"_delay(seconds={round_handler.FIRST_ROUND_JITTER})" in src
    assert dynamic_rendezvous._delay is round_handler._delay     # our wrapper is what torch calls


def test_only_the_jitter_is_skipped_only_once_and_only_when_asked(monkeypatch):
    calls = []
    monkeypatch.setattr(round_handler, "_torch_delay", lambda seconds: calls.append(seconds))
    jitter = round_handler.FIRST_ROUND_JITTER
    dynamic_rendezvous._delay(seconds=jitter)                   # not asked: torch's sleep
    with round_handler._without_jitter(True):
        dynamic_rendezvous._delay(seconds=(0, 0.5))             # a CAS backoff: never skipped
        dynamic_rendezvous._delay(seconds=jitter)               # skipped
        dynamic_rendezvous._delay(seconds=jitter)               # a second one is not
    with round_handler._without_jitter(True):
        other = threading.Thread(target=lambda: dynamic_rendezvous._delay(seconds=jitter))
        other.start(); other.join()                             # the keep-alive thread: untouched
    assert calls == [jitter, (0, 0.5), jitter, jitter]


@pytest.mark.integration
@pytest.mark.timeout(90)
@pytest.mark.parametrize("at_once", [False, True])
def test_a_survivors_rerendezvous_jitters_only_without_rejoin_at_once(tmp_path, monkeypatch, at_once):
    asked = []
    real = round_handler._torch_delay

    def recording(seconds):
        if seconds == round_handler.FIRST_ROUND_JITTER:
            asked.append(threading.current_thread().name)
        real(seconds=seconds)
    monkeypatch.setattr(round_handler, "_torch_delay", recording)
    conf = {"ttl": 60, "keep_alive_interval": 60, "keep_alive_max_attempt": 3, "join_timeout": 60,
            "last_call_timeout": 1, **({"rejoin_at_once": "1"} if at_once else {})}
    with EtcdServer(tmp_path / "etcd") as etcd:
        a, b = (create_etcd_v3_handler(RendezvousParameters("etcd-v3", etcd.endpoint, "rejoin", 1, 2, **conf))
                for _ in range(2))
        try:
            firsts = []
            threads = [threading.Thread(target=lambda h=h: firsts.append(h.next_rendezvous()), name=f"first-{i}")
                       for i, h in enumerate((a, b))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert sorted(i.world_size for i in firsts) == [2, 2]
            assert sorted(asked) == ["first-0", "first-1"]      # an agent's first rendezvous keeps it
            b._stop_heartbeats()
            b._liveness._stop.set()                              # b is lost: no refresh, no revoke
            asked.clear()
            t0 = time.monotonic()
            info = a.next_rendezvous()                           # the survivor's round (still round 0)
            assert (info.rank, info.world_size) == (0, 1), time.monotonic() - t0
            assert asked == ([] if at_once else [threading.current_thread().name])
        finally:
            for h in (a, b):
                h._liveness.stop()
