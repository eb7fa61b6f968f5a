"""A node that joins a running job must be admitted: with the library's rendezvous timeouts, the
running agents' heartbeats stay alive and they see the newcomer waiting for the next round.

torch's dynamic rendezvous (c10d, etcd-v3) sends a keep-alive only once the last one is at least
`keep_alive_interval` old, checked every `keep_alive_interval`, so a live agent's heartbeat is
routinely up to 2 x interval old. With keep_alive_max_attempt=2 an agent's own sync declares it
dead right after a round completes and it never sends a heartbeat again; a newcomer's first sync
then drops every running participant, starts the next round alone and waits, while the running
agents see nobody waiting and never restart (node_join and flapping_node on docker). This runs
real torch rendezvous handlers on a local c10d store with each scenario's own settings.
"""
from __future__ import annotations

import pickle
import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from chaosbench.scenario import load_scenario

LIBRARY = Path(__file__).resolve().parents[2] / "scenarios"


def _joining() -> list[str]:
    """Scenarios in which a node joins a job that is already training (a new or a restarted node)."""
    out = []
    for path in sorted(LIBRARY.glob("*.yaml")):
        for f in load_scenario(path).faults:
            if f.kind in ("add_node", "start_node") or (f.kind in ("kill_node", "stop_node") and f.duration_s):
                out.append(path.stem)
                break
    return out


JOINING = _joining()


def test_joining_scenarios_are_found():
    assert {"node_join", "flapping_node"} <= set(JOINING)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _handlers(timeouts: dict, min_nodes: int, max_nodes: int, count: int):
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    port = _free_port()
    out = []
    for i in range(count):
        params = RendezvousParameters(backend="c10d", endpoint=f"127.0.0.1:{port}", run_id="admission",
                                      min_nodes=min_nodes, max_nodes=max_nodes, is_host=i == 0,
                                      **timeouts)
        backend, store = create_backend(params)
        out.append((create_handler(store, backend, params), backend))
    return out


def _state(backend):
    return pickle.loads(backend.get_state()[0])


@pytest.mark.parametrize("name", JOINING)
def test_running_agents_admit_a_joining_node(name):
    s = load_scenario(LIBRARY / f"{name}.yaml")
    c = s.cluster
    assert c.rendezvous in ("c10d", "etcd-v3"), "the dynamic rendezvous is what this test runs"
    timeouts = dict(c.rdzv_timeouts)
    interval = timeouts.get("keep_alive_interval", 5)
    running = c.elastic.min_nodes
    agents = _handlers(timeouts, c.elastic.min_nodes, c.elastic.max_nodes, running + 1)
    newcomer, _ = agents.pop()
    joins = [threading.Thread(target=h.next_rendezvous, daemon=True) for h, _ in agents]
    for t in joins:
        t.start()
    for t in joins:
        t.join(timeout=timeouts.get("last_call_timeout", 30) + 60)
    assert not any(t.is_alive() for t in joins), "the running agents did not complete a first round"

    stop = threading.Event()

    def monitor(h):   # the agent's monitor loop polls num_nodes_waiting at --monitor-interval
        while not stop.is_set():
            h.num_nodes_waiting()
            time.sleep(0.1)

    monitors = [threading.Thread(target=monitor, args=(h,), daemon=True) for h, _ in agents]
    for t in monitors:
        t.start()
    try:
        time.sleep(3 * interval + 1)   # a few keep-alive periods of training
        store = agents[0][1]
        st = _state(store)
        now = datetime.now(timezone.utc)
        ages = {str(n): round((now - hb).total_seconds(), 1) for n, hb in st.last_heartbeats.items()}
        assert len(st.participants) == running and len(ages) == running, (
            f"{name}: after {3 * interval + 1} s of training the store lists {len(st.participants)} "
            f"participants and heartbeats {ages}")
        expiry = interval * timeouts.get("keep_alive_max_attempt", 3)

        from torch.distributed.elastic.rendezvous import RendezvousError

        def join():   # ends when the running agents close the rendezvous below
            try:
                newcomer.next_rendezvous()
            except RendezvousError:
                pass

        joiner = threading.Thread(target=join, daemon=True)
        joiner.start()
        deadline = time.monotonic() + 4 * interval + 5
        seen = [0] * running
        while time.monotonic() < deadline and not all(seen):
            seen = [h.num_nodes_waiting() for h, _ in agents]
            time.sleep(0.2)
        st = _state(store)
        assert all(seen), (
            f"{name}: the running agents never saw the newcomer waiting (they saw {seen}); store: "
            f"round {st.round}, complete {st.complete}, {len(st.participants)} participant(s), "
            f"{len(st.wait_list)} waiting. Before the join their heartbeats were {ages} s old, expiry "
            f"{expiry} s" + (": they had stopped sending keep-alives (keep_alive_max_attempt < 3 lets "
                             "an agent expire itself)" if max(ages.values()) >= expiry else ""))
        assert st.round == 0 and st.complete and len(st.participants) == running
    finally:
        stop.set()
        for t in monitors:
            t.join(timeout=5)
        for h, _ in agents:
            h.shutdown()   # closes the rendezvous: a waiting newcomer gives up
        newcomer.shutdown()
