"""chaosbench.etcd: list, clean and find stale rendezvous state (v3 and torch's v2 layouts)."""
import base64
import pickle
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

from chaosbench.etcd import delete_run, list_keys, runs, stale_runs
from chaosbench.services.etcd_server import EtcdServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def etcd(tmp_path):
    with EtcdServer(tmp_path / "etcd") as server:
        yield server


def _real_run(endpoint, run_id, close):
    """A one-node rendezvous through torch's own handler: real state and store keys in etcd."""
    params = RendezvousParameters("etcd-v3", endpoint, run_id, 1, 1, local_addr="127.0.0.1", ttl=60,
                                  last_call_timeout=1)
    handler = get_rendezvous_handler(params)
    info = handler.next_rendezvous()
    assert info.world_size == 1
    if close:
        handler.shutdown()                    # a finished run: closed state left behind
    else:
        handler._stop_heartbeats()            # a run whose node died: heartbeats stop
        handler._liveness.stop()              # and its liveness key goes


def _v2_put(endpoint, key, value):
    req = urllib.request.Request(f"http://{endpoint}/v2/keys{key}", method="PUT",
                                 data=urllib.parse.urlencode({"value": value}).encode())
    urllib.request.urlopen(req, timeout=5).close()


def test_list_and_delete_v3_run(etcd):
    _real_run(etcd.endpoint, "done", close=True)
    keys = list_keys(etcd.endpoint, "done")
    assert "/chaosbench/rdzv/done/state" in keys
    assert any(k.endswith("/MASTER_ADDR") for k in keys)
    info = {r.run_id: r for r in runs(etcd.endpoint)}["done"]
    assert info.layout == "v3" and info.closed is True and len(info.participants) == 1
    assert [r.run_id for r in stale_runs(etcd.endpoint)] == ["done"]
    assert delete_run(etcd.endpoint, "done") == len(keys)
    assert list_keys(etcd.endpoint, "done") == []


def test_dead_run_becomes_stale_after_heartbeats_stop(etcd):
    _real_run(etcd.endpoint, "dead", close=False)
    info = {r.run_id: r for r in runs(etcd.endpoint)}["dead"]
    assert info.closed is False and info.heartbeat_age_s < 30
    assert stale_runs(etcd.endpoint, older_than=60) == []           # still fresh
    assert [r.run_id for r in stale_runs(etcd.endpoint, older_than=0)] == ["dead"]


def test_v2_layouts_are_listed_and_cleaned(etcd):
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousState
    state = _RendezvousState()
    state.closed = True
    _v2_put(etcd.endpoint, "/torch/elastic/rendezvous/old2", base64.b64encode(pickle.dumps(state)).decode())
    mine = base64.b64encode(b"torch.rendezvous.old2.0/MASTER_ADDR").decode()
    other = base64.b64encode(b"torch.rendezvous.keep.0/MASTER_ADDR").decode()
    _v2_put(etcd.endpoint, f"/torch/elastic/store/{mine}", "x")
    _v2_put(etcd.endpoint, f"/torch/elastic/store/{other}", "x")
    _v2_put(etcd.endpoint, "/torchelastic/p2p/run_legacy/rdzv/active_version", "{}")
    assert sorted(list_keys(etcd.endpoint, "old2")) == sorted(
        ["/torch/elastic/rendezvous/old2", f"/torch/elastic/store/{mine}"])
    layouts = {r.run_id: (r.layout, r.closed) for r in runs(etcd.endpoint)}
    assert layouts["old2"] == ("v2", True) and layouts["legacy"] == ("v2-legacy", None)
    assert delete_run(etcd.endpoint, "old2") == 2
    assert delete_run(etcd.endpoint, "legacy") == 1
    assert list_keys(etcd.endpoint, "keep") == [f"/torch/elastic/store/{other}"]   # another run's key kept


def test_cli(etcd):
    _real_run(etcd.endpoint, "cli", close=True)
    cmd = [sys.executable, "-m", "chaosbench.etcd"]
    out = subprocess.run(cmd + ["list", "--endpoint", etcd.endpoint], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "cli" in out.stdout and "stale=True" in out.stdout, out.stderr
    out = subprocess.run(cmd + ["clean", "--endpoint", etcd.endpoint, "--stale"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and '"cli"' in out.stdout, out.stderr
    out = subprocess.run(cmd + ["list", "--endpoint", etcd.endpoint, "--run-id", "cli"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == ""
    out = subprocess.run(cmd + ["list", "--endpoint", "nohostport"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "HOST:PORT" in out.stderr
