"""The address backend end to end: a containerised Ray cluster with its dashboard, used only through its
address (RAY_ADDRESS=http://127.0.0.1:<port docker picked>): the preflight, the driver and the cleanup
are Ray jobs, the fault goes to the node's agent, the events come back through the driver's log. A
worker crash, every check evaluated (95 s and 124 s on two cores: the cluster 13-18 s, the run 79-106 s)."""
import json
import time
from pathlib import Path

import pytest

from chaosbench.cluster import available_backends
from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.ray.jobs_api import JobsClient
from chaosbench.runner import RunOptions, run_scenario

SCENARIO = Path(__file__).with_name("site_worker_crash.yaml")
# the site's own settings (the GCS reads them at its start): as the containerised stories set them
SITE_ENV = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
            "RAY_health_check_failure_threshold": "3"}


@pytest.mark.chaos
def test_a_worker_crash_on_a_cluster_reached_only_through_its_address(tmp_path, monkeypatch):
    why = available_backends()["docker"]
    if why:
        pytest.skip(f"the test cluster needs docker: {why}")
    from chaosbench.cluster.ray.backend import RayCluster
    spec = ClusterSpec(run_id="site", run_dir=tmp_path / "site", nodes=3, min_nodes=1, max_nodes=3, env=SITE_ENV)
    spec.run_dir.mkdir()
    t0 = time.monotonic()
    with RayCluster(spec, dashboard=True) as site:
        address = site.dashboard_address()
        client = JobsClient(address, timeout_s=5)
        deadline = time.monotonic() + 120
        while True:   # the dashboard answers a while after the head's GCS
            try:
                client.version()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        up_s = time.monotonic() - t0
        monkeypatch.setenv("RAY_ADDRESS", address)
        out = run_scenario(SCENARIO, RunOptions(backend="ray", report_dir=tmp_path / "reports"))
    result = out.result
    assert out.exit_code == 0, (result.error if result else None, out.run_dir,
                                [(c.name, c.status, c.reason) for c in (result.checks if result else [])])
    assert all(c.status != "not_evaluated" for c in result.checks), [(c.name, c.status) for c in result.checks]
    ray = json.loads((out.run_dir / "ray.json").read_text())
    roles = [j["role"] for j in ray["jobs"]]
    assert roles[:2] == ["preflight", "driver"] and roles[-1] == "cleanup", roles
    # this machine reaches the nodes' addresses (docker's bridge): the fault went straight to the agent
    assert ray["fault_channel"] == {"direct": True} and set(ray["agents"]) == {"node-0", "node-1", "node-2"}
    assert "runtime_resources" in (out.run_dir / "logs" / "driver.log").read_text()   # the trainer came from the package
    print(f"site cluster up in {up_s:.1f}s; run {result.duration_s:.1f}s; jobs "
          f"{[(j['role'], j.get('seconds')) for j in ray['jobs']]}")
