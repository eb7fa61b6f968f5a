"""etcd checks against a real etcd 3.4: down, without v2, with v2, stale rendezvous state and its clean command."""
import base64
import shlex
import subprocess

import pytest
import requests

from chaosbench.doctor import Status, from_env
from chaosbench.doctor.checks_etcd import etcd_checks
from chaosbench.services.ports import free_port

from .conftest import etcd_process, run_doctor

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def _target(url, backend, run_id="doctor-run"):
    t = from_env({"CHAOSBENCH_ETCD_ENDPOINT": url, "PET_RDZV_BACKEND": backend, "CHAOSBENCH_RUN_ID": run_id})
    return t


def _by_name(results):
    return {r.name: r for r in results}


def test_etcd_down_closed_port():
    url = f"http://127.0.0.1:{free_port()}"
    res = etcd_checks(_target(url, "etcd-v3"))
    assert len(res) == 1 and res[0].status == Status.FAIL
    assert "GET " + url + "/health failed: ConnectionError" in res[0].evidence
    assert "start etcd" in res[0].fix and f"curl {url}/health" in res[0].fix


def test_etcd_without_v2_fails_for_torchrun_etcd_backend(tmp_path):
    with etcd_process(tmp_path, enable_v2=False) as url:
        res = _by_name(etcd_checks(_target(url, "etcd")))
        assert res["etcd health"].status == Status.PASS
        assert "etcdserver 3.4" in res["etcd version"].evidence
        v2 = res["etcd v2 API"]
        assert v2.status == Status.FAIL
        assert "needs etcd's v2 API, which is disabled" in v2.evidence and "-> 404" in v2.evidence
        assert "--enable-v2" in v2.fix and "etcd-v3" in v2.fix
        # the same etcd is fine for the v3 backend
        assert _by_name(etcd_checks(_target(url, "etcd-v3")))["etcd v2 API"].status == Status.PASS
        # and the CLI exits non-zero on the FAIL
        p = run_doctor("--env", "--no-versions", "--etcd", url, "--rdzv-backend", "etcd", "--json",
                       env={"PATH": "/usr/bin:/bin", "CHAOSBENCH_RUN_ID": "x"})
        assert p.returncode == 1 and '"etcd v2 API"' in p.stdout


def test_etcd_with_v2_passes(tmp_path):
    with etcd_process(tmp_path, enable_v2=True) as url:
        res = _by_name(etcd_checks(_target(url, "etcd")))
        assert res["etcd v2 API"].status == Status.PASS
        assert res["etcd rendezvous state"].status == Status.PASS


def test_stale_v3_state_warns_and_clean_command_works(tmp_path):
    from chaosbench.rendezvous.layout import v3_state_key
    run_id = "doctor-stale"
    with etcd_process(tmp_path, enable_v2=True) as url:
        key = v3_state_key(run_id)
        b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        requests.post(f"{url}/v3/kv/put", json={"key": b64(key), "value": b64("{}")}, timeout=5).raise_for_status()
        requests.put(f"{url}/v2/keys/torch/elastic/rendezvous/{run_id}/rdzv/active_version", data={"value": "{}"},
                     timeout=5).raise_for_status()
        r = _by_name(etcd_checks(_target(url, "etcd-v3", run_id)))["etcd rendezvous state"]
        assert r.status == Status.WARN
        assert key in r.evidence and "1 v3 and" in r.evidence
        assert f"python -m chaosbench.etcd clean --endpoint {url[7:]} --run-id {run_id}" in r.fix
        assert "etcdctl" in r.fix and "v2/keys/torch/elastic/rendezvous/" in r.fix
        # the fix as printed really cleans the state: run the curl-free parts of it
        etcdctl = next(part for part in r.fix.split(" or ") if "etcdctl" in part)
        subprocess.run(shlex.split(etcdctl.split("ETCDCTL_API=3 ", 1)[1]), check=True, timeout=20,
                       env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"}, capture_output=True)
        top = next(part for part in r.fix.split(" or ") if part.startswith("curl")).split("'")[1]
        requests.delete(top, timeout=5).raise_for_status()
        after = _by_name(etcd_checks(_target(url, "etcd-v3", run_id)))["etcd rendezvous state"]
        assert after.status == Status.PASS, after.evidence


@pytest.mark.parametrize("age_s,live", [(300, False), (1, True)])
def test_rendezvous_state_liveness_from_heartbeats(tmp_path, age_s, live):
    """A real DynamicRendezvous state (as the etcd-v3 backend stores it): old heartbeat = stale, fresh = live."""
    import datetime as dt
    import pickle
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState
    from chaosbench.rendezvous.layout import v3_state_key
    run_id = f"doctor-hb-{age_s}"
    state = _RendezvousState()
    node = _NodeDesc("10.0.0.7", 4242, 0)
    state.participants[node] = 0
    state.last_heartbeats[node] = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=age_s)
    with etcd_process(tmp_path, enable_v2=False) as url:
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        requests.post(f"{url}/v3/kv/put", json={"key": b64(v3_state_key(run_id).encode()),
                                                "value": b64(pickle.dumps(state))}, timeout=5).raise_for_status()
        r = _by_name(etcd_checks(_target(url, "etcd-v3", run_id)))["etcd rendezvous state"]
        assert r.status == Status.WARN
        assert "participants ['10.0.0.7_4242_0']" in r.evidence
        # the stuck-run diagnosis reads the same state: 1 of 2 nodes joined
        from chaosbench.doctor.cli import main
        run = tmp_path / run_id
        run.mkdir()
        import contextlib, io, json as _json  # noqa: E401
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = main(["--run", str(run), "--etcd", url, "--run-id", run_id, "--nodes", "2", "--json"])
        d = _json.loads(buf.getvalue())
        assert rc == 1 and d["phase"] == "rendezvous"
        assert any("(v3) shows 1 of 2 nodes joined (closed=False): 10.0.0.7_4242_0" in e for e in d["evidence"])
        if live:
            assert f"a live job is using run id {run_id!r}" in r.evidence and "pick another run id" in r.fix
        else:
            import re
            assert re.search(r"last heartbeat 3\d\d s ago", r.evidence) and "leftover state" in r.evidence
            assert "chaosbench.etcd clean" in r.fix
