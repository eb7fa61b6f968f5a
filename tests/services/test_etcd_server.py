"""EtcdServer: a real etcd process, healthy on start, restartable on the same data, always stopped."""
import os
import urllib.request

from pathlib import Path

import pytest

from chaosbench.services.etcd_server import EtcdError, EtcdServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def _v2_put(url, key, value):
    req = urllib.request.Request(f"{url}/v2/keys/{key}", data=f"value={value}".encode(), method="PUT",
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    urllib.request.urlopen(req, timeout=5).close()


def _v2_get(url, key):
    import json
    with urllib.request.urlopen(f"{url}/v2/keys/{key}", timeout=5) as resp:
        return json.loads(resp.read())["node"]["value"]


def test_lifecycle_restart_keeps_data_pause_resume(tmp_path):
    with EtcdServer(tmp_path / "etcd") as etcd:
        assert etcd.health()[0]
        _v2_put(etcd.url, "k", "v1")               # v2 API is on, for torchrun's etcd backends
        port, pid = etcd.client_port, etcd.proc.pid
        etcd.stop()
        assert not etcd.running and not etcd.health(0.5)[0]
        etcd.start()                               # same port, same data dir
        assert etcd.client_port == port and etcd.proc.pid != pid
        assert _v2_get(etcd.url, "k") == "v1"
        etcd.pause()
        ok, detail = etcd.health(0.5)
        state = Path(f"/proc/{etcd.proc.pid}/stat").read_text().split(")")[-1].split()[0]
        assert not ok, f"a stopped etcd answered (state {state}): {detail}"   # hung: the socket is open, nobody answers
        etcd.resume()
        assert etcd.health(2)[0]
        etcd.kill()
        assert not etcd.running
        etcd.start()
        assert _v2_get(etcd.url, "k") == "v1"
        proc = etcd.proc
    assert proc.poll() is not None                 # the context manager stopped it


def test_stopped_even_when_the_body_raises(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with EtcdServer(tmp_path / "etcd") as etcd:
            proc = etcd.proc
            raise RuntimeError("boom")
    assert proc.poll() is not None


def test_stop_of_a_paused_etcd_does_not_hang(tmp_path):
    etcd = EtcdServer(tmp_path / "etcd").start()
    etcd.pause()
    etcd.stop(timeout=5)
    assert not etcd.running


def test_clear_errors(tmp_path):
    with pytest.raises(EtcdError, match="binary not found"):
        EtcdServer(tmp_path / "e1", binary="/nonexistent/etcd").start()
    with EtcdServer(tmp_path / "e2") as first:      # same client port twice: the second cannot bind
        second = EtcdServer(tmp_path / "e3", client_port=first.client_port, startup_timeout=10)
        with pytest.raises(EtcdError, match="already in use"):
            second.start()
        assert not second.running
    assert os.path.exists(tmp_path / "e2.log")
