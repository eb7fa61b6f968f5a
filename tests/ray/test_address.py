"""The address backend (a site's Ray cluster at $RAY_ADDRESS) without Ray: its HTTP client, package, log
pump, faults, teardown and sweep against a stand-in Jobs API over real HTTP (fake_jobs_api.py), and the
agent's process search on this machine's real processes."""
import io
import json
import socket
import subprocess
import sys
import time
import zipfile

import ipaddress

import pytest

from chaosbench.cluster import backend_primitives, create_cluster
from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.docker.compose_file import ComposePlan, render
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.ray import agent
from chaosbench.cluster.ray.address import RayAddressCluster, split_log, sweep, working_dir_files
from chaosbench.cluster.ray.compose import DASHBOARD_PORT, HEAD, with_ray
from chaosbench.cluster.ray.jobs_api import JobsClient, package, parse_address
from tests.ray.fake_jobs_api import FakeJobsAPI
from tests.ray.test_backend import doc
from tests.ray.test_backend import spec as docker_spec


def spec(tmp_path, **kw) -> ClusterSpec:
    kw.setdefault("ray", {"storage": "/shared/ray"})
    return ClusterSpec(run_id="r1", run_dir=tmp_path, nodes=2, min_nodes=2, max_nodes=2,
                       trainer_config="trainer/configs/tiny.yaml", **kw)


@pytest.fixture
def fake():
    api = FakeJobsAPI()
    yield api
    api.close()


@pytest.mark.parametrize("bad", ["ray-head:8265", "ray://head:10001", "http://head:8265/api", "http://:8265",
                                 "http://head:port", ""])
def test_a_malformed_address_is_refused_naming_the_variable_and_the_fix(bad):
    with pytest.raises(ClusterError) as e:
        parse_address(bad)
    assert "RAY_ADDRESS" in str(e.value) and "http://ray-head.example:8265" in str(e.value)


def test_create_cluster_takes_ray_address_from_the_environment(tmp_path, monkeypatch, fake):
    monkeypatch.setenv("RAY_ADDRESS", fake.address + "/")
    cluster = create_cluster("ray", spec(tmp_path))
    assert isinstance(cluster, RayAddressCluster) and cluster.client.address == fake.address
    assert backend_primitives()["ray"] == {"kill_worker", "freeze_worker", "thaw_worker", "kill_raylet"}
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    with pytest.raises(ClusterError, match="RAY_ADDRESS"):
        create_cluster("ray", spec(tmp_path))


def test_node_and_head_faults_are_withheld_with_the_reason(tmp_path, fake):
    cluster = RayAddressCluster(spec(tmp_path), fake.address)
    for name in ("kill_node", "partition", "kill_head", "fill_nvme"):
        assert name not in cluster.supported_faults
        with pytest.raises(Exception, match="site") as e:
            getattr(cluster, name)("node-0") if name != "kill_head" else cluster.kill_head()
        assert "does not support" in str(e.value)


def test_the_containerised_clusters_storage_is_refused_with_the_fix(tmp_path, fake):
    with pytest.raises(ClusterError, match="trainer.ray.storage: 'shared'.*absolute path"):
        RayAddressCluster(spec(tmp_path, ray={"storage": "shared"}), fake.address)
    with pytest.raises(ClusterError, match="trainer.image"):
        RayAddressCluster(spec(tmp_path, trainer_image="me/img"), fake.address)


def test_the_package_has_the_trainer_and_the_agent_and_is_the_same_for_the_same_files(tmp_path):
    (tmp_path / "my_loop.py").write_text("def train_loop_per_worker(c): pass\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.pyc").write_bytes(b"x")
    uri, data = package(working_dir_files(str(tmp_path)))
    assert uri.startswith("gcs://_ray_pkg_") and uri.endswith(".zip")
    assert package(working_dir_files(str(tmp_path)))[0] == uri
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert {"my_loop.py", "trainer/ray_driver.py", "trainer/train.py", "chaosbench/cluster/ray/agent.py",
            "chaosbench/observer/stream.py", "chaosbench/instrument/writer.py"} <= set(names)
    assert not any("__pycache__" in n for n in names)
    # the packages around the agent are stubs: importing them pulls in nothing of the harness
    assert zipfile.ZipFile(io.BytesIO(data)).read("chaosbench/cluster/__init__.py") == b""


def test_the_client_uploads_a_package_once_and_drives_a_job(fake):
    client = JobsClient(fake.address)
    assert client.version()["ray_version"] == "2.60.0"
    uri, data = package({"a.py": b"print(1)\n"})
    assert client.upload(uri, data) is True and client.upload(uri, data) is False
    assert fake.packages[f"/api/packages/gcs/{uri[len('gcs://'):]}"] == data
    assert client.submit("python -m trainer.ray_driver", "run-1", {"working_dir": uri}, {"k": "v"}) == "run-1"
    assert client.status("run-1")["status"] == "RUNNING"
    assert client.stop("run-1") and client.wait("run-1", 5)["status"] == "STOPPED"
    with pytest.raises(ClusterError, match="HTTP 400.*already exists"):
        client.submit("python -m trainer.ray_driver", "run-1", {}, {})


def test_an_unreachable_or_foreign_address_says_what_to_check(fake):
    fake.close()
    with pytest.raises(ClusterError, match="is the head's dashboard up"):
        JobsClient(fake.address, timeout_s=2).version()


def test_the_log_pump_splits_agent_event_lines_from_the_drivers_own():
    lines = ["ray_driver: 3 worker node(s) up",
             '(FaultAgent pid=7, ip=10.0.0.10) CBEV\tevents-node-0-local0.jsonl\t{"event": "step", "step": 1}',
             "(FaultAgent pid=7, ip=10.0.0.10) CBEV\t../escape.jsonl\t{}",
             "(RayTrainWorker pid=9) step 1 loss 0.5"]
    plain, events = split_log(lines)
    assert plain == [lines[0], lines[3]]
    assert events == {"events-node-0-local0.jsonl": ['{"event": "step", "step": 1}']}


def test_a_run_submits_the_driver_streams_events_and_tears_down(tmp_path, fake):
    cluster = RayAddressCluster(spec(tmp_path), fake.address)
    cluster.up()
    try:
        assert [j["role"] for j in cluster.jobs] == ["preflight"]
        cluster.start_training()
        driver = fake.jobs["r1"]
        assert driver["entrypoint"].startswith("RAY_DEDUP_LOGS=0 python -m trainer.ray_driver")
        assert "--site" in driver["entrypoint"] and "--storage /shared/ray/" not in driver["entrypoint"]
        assert driver["runtime_env"]["working_dir"] == cluster.uri
        assert driver["metadata"]["chaosbench_run"] == "r1" and driver["metadata"]["chaosbench_role"] == "driver"
        assert cluster.node_status("node-1") == "running"
        # the agent's lines arrive in two polls, the second half of a line with the second
        row = json.dumps({"event": "step", "step": 3, "node": "node-1"})
        driver["logs"] = f"ray_driver: nodes up\n(FaultAgent pid=1) CBEV\tevents-node-1-local0.jsonl\t{row[:10]}"
        cluster._read_logs()
        driver["logs"] += f"{row[10:]}\nworker says hi\n"
        cluster._read_logs()
        assert (cluster.events_dir / "events-node-1-local0.jsonl").read_text() == row + "\n"
        assert (tmp_path / "logs" / "driver.log").read_text() == "ray_driver: nodes up\nworker says hi\n"
        driver["status"] = "FAILED"
        cluster._status = (0.0, "RUNNING")
        assert cluster.node_status("node-0") == "exited:1"
        cluster.collect()
        assert json.loads((tmp_path / "exits.json").read_text())["driver"]["status"] == "FAILED"
    finally:
        cluster.down()
    assert cluster.torn_down and [j["role"] for j in cluster.jobs][-1] == "cleanup"
    assert "cleanup --run r1" in fake.jobs["r1-cleanup"]["entrypoint"]


def test_teardown_stops_a_driver_still_running(tmp_path, fake):
    with RayAddressCluster(spec(tmp_path), fake.address) as cluster:
        cluster.start_training()
    assert fake.jobs["r1"]["status"] == "STOPPED" and cluster.torn_down


def test_a_site_image_without_torch_is_refused_up_front_naming_it(tmp_path):
    missing = json.dumps({"python": "3.11.2", "found": {"ray": "2.60.0"},
                          "missing": ["torch (ModuleNotFoundError: No module named 'torch')"]})
    api = FakeJobsAPI(finish=lambda e: ("FAILED", missing + "\n") if "preflight" in e else ("SUCCEEDED", ""))
    try:
        with pytest.raises(ClusterError, match="cannot run this job: torch .*No module named 'torch'.*Fix"):
            with RayAddressCluster(spec(tmp_path), api.address):
                pass
        assert "trainer.train" in api.jobs["r1-preflight"]["entrypoint"]
    finally:
        api.close()


def _title_procs(n: int) -> list[subprocess.Popen]:
    """Processes whose command line carries a Ray Train worker's title, as Ray's do."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", agent.TRAIN_WORKER + ".fake"])
             for _ in range(n)]
    time.sleep(0.05)
    return procs


def _only_ours(procs) -> bool:
    """No other process here carries the title (a Ray cluster's are in their containers' namespaces)."""
    return agent.find(agent.TRAIN_WORKER) == [p.pid for p in procs]


def test_a_worker_fault_goes_straight_to_the_nodes_agent_when_it_is_reachable(tmp_path, fake):
    procs = _title_procs(1)
    try:
        with RayAddressCluster(spec(tmp_path), fake.address) as cluster:
            cluster.start_training()
            server = agent.serve("127.0.0.1", cluster.token)
            assert fake.jobs["r1"]["runtime_env"]["env_vars"][agent.TOKEN_ENV] == cluster.token
            fake.jobs["r1"]["logs"] = f'ray_driver: agents {{"node-1": "127.0.0.1:{server.server_address[1]}"}}\n'
            if _only_ours(procs):
                cluster.kill_worker("node-1", 0)
                assert procs[0].wait(5) == -9 and cluster.channel == {"direct": True}
            with pytest.raises(ClusterError, match="no Ray Train worker #3"):
                cluster.kill_worker("node-1", 3)
            with pytest.raises(ClusterError, match="no fault agent yet"):
                cluster.kill_raylet("node-0")
            with pytest.raises(ClusterError, match="unknown node"):
                cluster.kill_raylet("node-7")
            assert not [j for j in fake.jobs if "fault" in j]   # no job was needed
            server.shutdown()
    finally:
        procs[0].kill()
        procs[0].wait()


def test_an_agent_refuses_a_request_without_the_runs_token():
    server = agent.serve("127.0.0.1", "s3cret")
    try:
        with pytest.raises(RuntimeError, match="wrong token"):
            agent.request(f"127.0.0.1:{server.server_address[1]}", "guess", "worker")
    finally:
        server.shutdown()


def test_an_agent_out_of_reach_is_asked_by_a_job_on_the_head(tmp_path):
    answer = json.dumps({"node": "node-1", "what": "worker", "sig": "KILL", "pids": [42]})
    api = FakeJobsAPI(finish=lambda e: ("SUCCEEDED", answer + "\n") if " signal " in e else ("SUCCEEDED", ""))
    try:
        with RayAddressCluster(spec(tmp_path), api.address) as cluster:
            cluster.start_training()
            api.jobs["r1"]["logs"] = 'ray_driver: agents {"node-1": "127.0.0.1:1"}\n'   # refused here
            cluster.kill_worker("node-1", 0)
            entry = api.jobs["r1-fault-1"]["entrypoint"]
            assert "signal --to 127.0.0.1:1 --node node-1 --what worker --local-rank 0 --sig KILL" in entry
            assert cluster.channel["direct"] is False and "127.0.0.1:1" in cluster.channel["why"]
        assert json.loads((tmp_path / "ray.json").read_text())["fault_channel"]["direct"] is False
    finally:
        api.close()


def test_clean_stops_the_jobs_of_a_harness_that_is_gone(fake):
    client = JobsClient(fake.address)
    dead = f"{socket.gethostname()}:999999:0"   # this host, a pid that is not running
    client.submit("python -m trainer.ray_driver", "gone-run", {"working_dir": "gcs://_ray_pkg_1.zip"},
                  {"chaosbench_owner": dead, "chaosbench_run": "gone-run", "chaosbench_role": "driver"})
    client.submit("python -m trainer.ray_driver", "other", {}, {})   # not ours: no owner
    from chaosbench.cluster import owner
    client.submit("python -m trainer.ray_driver", "mine", {}, {"chaosbench_owner": owner.token(),
                                                                "chaosbench_run": "mine", "chaosbench_role": "driver"})
    assert sweep(client) == ["gone-run"]
    assert fake.jobs["gone-run"]["status"] == "STOPPED" and fake.jobs["other"]["status"] == "RUNNING"
    assert fake.jobs["mine"]["status"] == "RUNNING"
    assert any("cleanup --run gone-run" in j["entrypoint"] for j in fake.jobs.values())


def test_the_agent_finds_train_workers_by_title_oldest_first_and_signals_one():
    procs = _title_procs(2)
    try:
        found = [p for p in agent.find(agent.TRAIN_WORKER) if p in {q.pid for q in procs}]
        assert found == [procs[0].pid, procs[1].pid]
        if _only_ours(procs):
            assert agent.signal_here("worker", 1, "KILL") == [procs[1].pid]
            assert procs[1].wait(5) == -9 and procs[0].poll() is None
        with pytest.raises(RuntimeError, match="no Ray Train worker #9"):
            agent.signal_here("worker", 9)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_nodes_are_named_by_ip_and_only_those_with_a_cpu():
    rows = [{"NodeID": "c", "Alive": True, "NodeManagerAddress": "10.0.0.10", "Resources": {"CPU": 1}},
            {"NodeID": "a", "Alive": True, "NodeManagerAddress": "10.0.0.9", "Resources": {"CPU": 1}},
            {"NodeID": "h", "Alive": True, "NodeManagerAddress": "10.0.0.5", "Resources": {}},
            {"NodeID": "d", "Alive": False, "NodeManagerAddress": "10.0.0.8", "Resources": {"CPU": 1}}]
    assert agent.names(rows) == {"a": "node-0", "c": "node-1"}
    env = agent.node_env("r1", "node-1")
    assert env["CHAOSBENCH_NODE"] == "node-1" and env["CHAOSBENCH_EVENTS_DIR"] == "/tmp/chaosbench/r1/events"


def test_the_test_clusters_head_publishes_the_dashboard_on_a_port_docker_picks(tmp_path):
    s = docker_spec(tmp_path)
    d, _ = doc(tmp_path, s)
    assert "--include-dashboard=false" in d["services"][HEAD]["command"] and "ports" not in d["services"][HEAD]
    plan = ComposePlan(project="cbtest", image="img", subnet=ipaddress.ip_network("10.201.3.0/24"), owner="o",
                       events_host_dir=str(tmp_path / "events"))
    head = with_ray(render(plan, s, ["node-0"]), plan, ["node-0"], 1, None, dashboard=True)["services"][HEAD]
    assert "--include-dashboard=true" in head["command"] and "--dashboard-host=0.0.0.0" in head["command"]
    assert head["ports"] == [f"127.0.0.1::{DASHBOARD_PORT}"]   # no host port chosen here: no race for it


def test_chaosbench_clean_sweeps_the_site_cluster_at_ray_address(monkeypatch, fake):
    from chaosbench.cluster.clean import _ray_address
    JobsClient(fake.address).submit("python -m trainer.ray_driver", "gone", {}, {
        "chaosbench_owner": f"{socket.gethostname()}:999999:0", "chaosbench_run": "gone", "chaosbench_role": "x"})
    monkeypatch.setenv("RAY_ADDRESS", fake.address)
    removed = {}
    _ray_address(False, removed)
    assert removed["ray jobs"] == ["gone"]
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:1")
    _ray_address(False, removed)
    assert removed["ray jobs"][0].startswith("not checked:")


def test_rays_own_logs_come_from_the_state_api_for_every_node_and_the_head(tmp_path, fake):
    fake.ray_logs.update({("10.0.0.11", "raylet.out"): "raylet of node-1\n", ("10.0.0.11", "debug_state.txt"): "x",
                          ("10.0.0.5", "gcs_server.out"): "gcs\n",
                          ("10.0.0.5", "train/ray-train-sys-controller-1.log"): "controller\n"})
    with RayAddressCluster(spec(tmp_path), fake.address) as cluster:
        cluster.start_training()
        fake.jobs["r1"]["logs"] = ('ray_driver: agents {"node-1": "10.0.0.11:5000", "node-0": "10.0.0.99:5000"}\n'
                                   "ray_driver: driver on 10.0.0.5\n")
        cluster.collect()
    ray = tmp_path / "logs" / "ray"
    assert (ray / "node-1" / "raylet.out").read_text() == "raylet of node-1\n"
    assert not (ray / "node-1" / "debug_state.txt").exists()   # only Ray's record worth keeping
    assert (ray / "ray-head" / "train" / "ray-train-sys-controller-1.log").read_text() == "controller\n"
    assert (ray / "ray-head" / "gcs_server.out").exists()
    assert not (ray / "node-0" / "raylet.out").exists() and not (ray / "node-0" / "not-fetched.txt").exists()
