"""Faults inject and heal themselves and log both; link/S3 faults against the real proxy and S3 endpoint."""
import hashlib
import json
import random

import pytest
import requests

from chaosbench.evidence.inventory import verify_dir
from chaosbench.faults import FaultContext, FaultLog, get_fault


class Stub:
    """Just the cluster attributes these faults read (no primitives are called on it)."""
    def __init__(self, tmp_path, proxy_api="", s3=""):
        self.root, self.proxy_api, self.s3_endpoint = tmp_path, proxy_api, s3
        self.killed = []

    def node_names(self):
        return ["node-0", "node-1", "node-2"]

    def nvme_dir(self, node):
        return self.root / node

    def kill_node(self, node):
        self.killed.append(node)


def make(name, params, cluster, log_path, seed=0, fid="f1"):
    cls = get_fault(name)
    ctx = FaultContext(cluster=cluster, log=FaultLog(log_path), rng=random.Random(f"{seed}:{fid}:target"))
    return cls(fid, cls.Params.model_validate(params), ctx)


def log_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_random_target_is_seeded(tmp_path):
    picks = []
    for seed in (1, 1, *range(2, 12)):
        c = Stub(tmp_path)
        make("kill_node", {"node": "random"}, c, tmp_path / "f.jsonl", seed=seed).inject()
        picks.append(c.killed[0])
    assert picks[0] == picks[1] and len(set(picks)) > 1
    recs = log_lines(tmp_path / "f.jsonl")
    assert recs[0]["fault"] == "kill_node" and recs[0]["action"] == "inject" and recs[0]["target"] == picks[0]


def _ckpt(d, data):
    d.mkdir(parents=True)
    (d / "state.pt").write_bytes(data)
    (d / "manifest.json").write_text(json.dumps({"file": "state.pt", "bytes": len(data),
                                                "sha256": hashlib.sha256(data).hexdigest()}))


def test_corrupt_checkpoint_flips_a_byte_of_the_newest(tmp_path):
    import os
    old, new = tmp_path / "node-1" / "step-20", tmp_path / "node-1" / "step-40"
    _ckpt(old, b"a" * 1000)
    _ckpt(new, b"b" * 1000)
    os.utime(old / "state.pt", (1, 1))
    os.utime(old / "manifest.json", (1, 1))
    f = make("corrupt_checkpoint", {"node": "node-1"}, Stub(tmp_path), tmp_path / "f.jsonl")
    f.inject()
    assert verify_dir(old) == (True, "sha256 checksum ok")
    valid, why = verify_dir(new)
    assert valid is False and why.startswith("checksum mismatch")
    assert f.target == "node-1:step-40/state.pt@500"
    assert f.heal() is None     # nothing to undo, nothing logged
    assert [r["action"] for r in log_lines(tmp_path / "f.jsonl")] == ["inject"]


def test_corrupt_checkpoint_without_checkpoint_says_so(tmp_path):
    (tmp_path / "node-0").mkdir()
    f = make("corrupt_checkpoint", {"node": "node-0"}, Stub(tmp_path), tmp_path / "f.jsonl")
    with pytest.raises(Exception, match="no checkpoint file under"):
        f.inject()


@pytest.mark.integration
def test_link_faults_against_the_real_proxy(tmp_path):
    from chaosbench.proxy.server import ProxyServer
    srv = ProxyServer("127.0.0.1", 0).start_in_thread()
    try:
        r = requests.post(f"{srv.url}/proxies", json={"name": "s3", "listen": "127.0.0.1:0",
                                                     "upstream": "127.0.0.1:9", "enabled": True}, timeout=5)
        assert r.status_code in (200, 201), r.text
        c = Stub(tmp_path, proxy_api=srv.url)
        tox = make("link_toxic", {"link": "s3", "toxic": "latency", "attributes": {"latency": 300}}, c,
                   tmp_path / "f.jsonl")
        tox.inject()
        toxics = requests.get(f"{srv.url}/proxies/s3/toxics", timeout=5).json()
        assert [(t["type"], t["attributes"]["latency"]) for t in toxics] == [("latency", 300)]
        tox.heal()
        assert requests.get(f"{srv.url}/proxies/s3/toxics", timeout=5).json() == []
        down = make("link_down", {"link": "s3"}, c, tmp_path / "f.jsonl", fid="f2")
        down.inject()
        assert requests.get(f"{srv.url}/proxies/s3", timeout=5).json()["enabled"] is False
        down.heal()
        assert requests.get(f"{srv.url}/proxies/s3", timeout=5).json()["enabled"] is True
        bad = make("link_toxic", {"link": "etcd", "toxic": "latency"}, c, tmp_path / "f.jsonl", fid="f3")
        with pytest.raises(Exception, match="404"):
            bad.inject()        # no 'etcd' proxy: the API's error is surfaced, not swallowed
        assert [(r["id"], r["action"]) for r in log_lines(tmp_path / "f.jsonl")] == [
            ("f1", "inject"), ("f1", "heal"), ("f2", "inject"), ("f2", "heal")]
    finally:
        srv.stop()


@pytest.mark.integration
def test_s3_error_against_the_real_endpoint(tmp_path):
    import boto3
    from botocore.exceptions import ClientError

    from chaosbench.services.s3 import S3Server
    s3 = S3Server().start()
    try:
        client = boto3.client("s3", endpoint_url=s3.endpoint_url, aws_access_key_id="x",
                              aws_secret_access_key="x", region_name="us-east-1")
        f = make("s3_error", {"mode": 403}, Stub(tmp_path, s3=s3.endpoint_url), tmp_path / "f.jsonl")
        f.inject()
        with pytest.raises(ClientError) as ei:
            client.put_object(Bucket="chaosbench", Key="k", Body=b"x")
        assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        f.heal()
        client.put_object(Bucket="chaosbench", Key="k", Body=b"x")
    finally:
        s3.stop()


def test_fault_log_records_when_the_action_started(tmp_path):
    """A kill takes effect while `docker kill` still runs; survivors can notice before it returns."""
    import time

    class SlowKill(Stub):
        def kill_node(self, node):
            self.started = time.time()
            time.sleep(0.3)
            super().kill_node(node)

    cluster = SlowKill(tmp_path)
    f = make("kill_node", {"node": "node-1"}, cluster, tmp_path / "faults.jsonl")
    ts = f.inject()
    (line,) = [json.loads(x) for x in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert line["ts"] == ts <= cluster.started
    assert line["took_s"] >= 0.3
