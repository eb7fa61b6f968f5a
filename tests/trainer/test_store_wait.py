"""wait_for_store: ranks other than the store's host poll MASTER_ADDR:MASTER_PORT before
init_process_group, so TCPStore's client never backs off after a refused first connect."""
import socket
import threading
import time

from trainer.distributed import DistEnv, wait_for_store


def env(rank):
    return DistEnv(rank=rank, local_rank=0, world_size=3, local_world_size=1, restart_count=0)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_waits_until_the_store_listens_then_returns_at_once():
    port = free_port()
    environ = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_late():
        time.sleep(0.3)
        server.bind(("127.0.0.1", port))
        server.listen()
    t = threading.Thread(target=listen_late)
    t.start()
    try:
        t0 = time.monotonic()
        waited = wait_for_store(env(1), 10.0, environ)
        done = time.monotonic() - t0
        t.join()
        assert 0.25 <= waited <= done
        assert done < 5.0           # polled, not one 10-s timeout
        assert wait_for_store(env(2), 10.0, environ) < 1.0   # listening: the next rank goes at once
    finally:
        server.close()


def test_rank_zero_hosts_the_store_and_does_not_wait():
    calls = []
    environ = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    assert wait_for_store(env(0), 10.0, environ, connect=lambda *a, **k: calls.append(a)) == 0.0
    assert calls == []


def test_an_agent_hosted_store_is_waited_for_by_rank_zero_too():
    calls = []

    class Conn:
        def close(self):
            pass
    environ = {"MASTER_ADDR": "h", "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    wait_for_store(env(0), 10.0, environ, connect=lambda addr, timeout: calls.append(addr) or Conn())
    assert calls == [("h", 29500)]


def test_an_unreachable_store_is_left_to_init_after_the_bound():
    now = [0.0]

    def refuse(addr, timeout):
        raise ConnectionRefusedError(addr)

    def sleep(s):
        now[0] += s
    environ = {"MASTER_ADDR": "nowhere", "MASTER_PORT": "29500"}
    waited = wait_for_store(env(1), 2.0, environ, connect=refuse, clock=lambda: now[0], sleep=sleep)
    assert 2.0 <= waited < 2.1      # gave up at the bound: init_process_group reports the failure


def test_missing_or_bad_address_leaves_it_to_init():
    for environ in ({}, {"MASTER_ADDR": "h"}, {"MASTER_ADDR": "h", "MASTER_PORT": "x"}):
        assert wait_for_store(env(1), 10.0, environ,
                              connect=lambda *a, **k: (_ for _ in ()).throw(AssertionError("no connect"))) == 0.0
