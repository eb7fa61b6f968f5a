"""The services step that runs on a node of a Slurm allocation (`--slurm-services node`), run here as
the node would run it: READY line with its address and ports, real etcd/S3/proxy behind it, service
faults through its control API, and nothing left after SIGTERM (scancel's first signal)."""
import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from chaosbench.cluster.services_api import etcd_ready, s3_ready

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _post(ready, path):
    url = f"http://{ready['host']}:{ready['ports']['control']}{path}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_services_step_serves_and_obeys_service_faults(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "chaosbench.cluster.slurm.services", "--data", str(tmp_path)],
                         cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("READY "), line
        ready = json.loads(line[6:])
        h, ports = ready["host"], ready["ports"]
        assert etcd_ready(f"http://{h}:{ports['proxy_etcd']}") and s3_ready(f"http://{h}:{ports['s3']}")
        assert _post(ready, "/s3/kill") == (200, "ok")
        with pytest.raises(OSError):   # nothing listens on the S3 port any more
            s3_ready(f"http://{h}:{ports['s3']}")
        assert _post(ready, "/s3/start") == (200, "ok")
        assert s3_ready(f"http://{h}:{ports['s3']}")
        assert _post(ready, "/etcd/pause")[0] == 200 and _post(ready, "/etcd/unpause")[0] == 200
        code, body = _post(ready, "/nosuch/kill")
        assert code == 500 and "unknown service" in body
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
        left = [pat for pat in (str(tmp_path), f"--port {ports['s3']}", f"--port {ports['proxy']}")
                if subprocess.run(["pgrep", "-f", "--", pat], capture_output=True).returncode == 0]
        assert not left, f"processes still running after SIGTERM: {left}"
    finally:
        if p.poll() is None:   # a failed assertion: stop it as scancel would, so its children go too
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
