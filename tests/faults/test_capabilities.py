"""What a fault needs is what it calls: every registered fault, in every variant of its parameters,
is run (inject + heal) against a recording cluster, and the primitives it called must be exactly
the ones needs_of() declares. `chaosbench list` and the runner's refusal read the same declaration."""
from types import SimpleNamespace

import pytest

from chaosbench.faults import fault_names
from chaosbench.faults.base import Fault, NodeParams
from chaosbench.faults.capabilities import missing_primitives, needs_of, support, variants
from chaosbench.proxy.server import ProxyServer
from tests.faults.recording import PRIMITIVES, RecordingCluster, make_fault

CASES = [(kind, params) for kind in fault_names() for params in variants(kind)]


@pytest.fixture(scope="module")
def proxy_api():
    """The link faults' routes, on an in-process proxy (their calls are not cluster primitives)."""
    srv = ProxyServer("127.0.0.1", 0).start_in_thread()
    with srv.client() as c:
        for link in ("etcd", "s3"):
            c.create_proxy(link, upstream="127.0.0.1:9")
    yield srv.url
    srv.stop()


def exercise(fault) -> set[str]:
    fault.prepare()
    fault.inject()
    fault.heal()
    return fault.cluster.called


def check_declared(kind: str, params: dict, called: set[str], needs: frozenset[str]) -> None:
    assert called <= needs, f"{kind} {params} calls {sorted(called - needs)} but does not declare it"
    assert needs <= called, f"{kind} {params} declares {sorted(needs - called)} but never calls it"


def test_the_primitives_are_read_from_the_cluster_base():
    assert {"kill_node", "start_node", "nvme_dir", "shm_dir", "wipe_node_storage", "freeze_worker"} <= PRIMITIVES
    assert "node_names" not in PRIMITIVES and "start_nodes" not in PRIMITIVES


def test_every_variant_is_exercised():
    kinds = {k for k, _ in CASES}
    assert kinds == set(fault_names())
    assert {p["tier"] for k, p in CASES if k == "corrupt_checkpoint"} == {"nvme", "memory"}
    assert {(p["wipe"], p["restart"]) for k, p in CASES if k == "kill_all" and not p["lose_unsynced_writes"]} == {
        (w, r) for w in ("none", "shm", "nvme", "all") for r in (False, True)}
    assert [p for k, p in CASES if k == "throttle_node"] == [{"cpu_fraction": 0.3}]   # required: its example


@pytest.mark.parametrize("kind,params", CASES, ids=[f"{k}-{'-'.join(map(str, p.values()))}" for k, p in CASES])
def test_a_fault_calls_exactly_the_primitives_it_declares(kind, params, tmp_path, proxy_api, monkeypatch):
    monkeypatch.setattr("chaosbench.services.s3.set_s3_fault", lambda endpoint, mode: mode)
    fault = make_fault(kind, params, RecordingCluster(tmp_path, proxy_api), tmp_path / "faults.jsonl")
    check_declared(kind, params, exercise(fault), needs_of(kind, params))


def test_the_check_catches_a_fault_that_calls_what_it_does_not_declare(tmp_path):
    class Drifted(Fault):   # corrupt_checkpoint as it was: calls nvme_dir, declares nothing
        name, help, Params = "drifted", "", NodeParams

        def _inject(self):
            self.cluster.nvme_dir(self.pick_node(self.p.node))

    from chaosbench.faults import FaultContext, FaultLog
    import random
    cluster = RecordingCluster(tmp_path)
    fault = Drifted("f1", NodeParams(), FaultContext(cluster, FaultLog(tmp_path / "f.jsonl"), random.Random(0)))
    with pytest.raises(AssertionError, match=r"calls \['nvme_dir'\] but does not declare it"):
        check_declared("drifted", {}, exercise(fault), Drifted.needs_for(fault.p))
    with pytest.raises(AssertionError, match=r"declares \['shm_dir'\] but never calls it"):
        check_declared("drifted", {}, {"nvme_dir"}, frozenset({"nvme_dir", "shm_dir"}))


def test_a_fault_touching_anything_but_primitives_fails_loudly(tmp_path):
    with pytest.raises(AttributeError, match="cluster._run_in_node"):
        RecordingCluster(tmp_path)._run_in_node("node-0", "script")


def test_needs_follow_the_parameters():
    assert needs_of("corrupt_checkpoint", {"tier": "nvme"}) == {"nvme_dir"}
    assert needs_of("corrupt_checkpoint", {"tier": "memory"}) == {"shm_dir"}
    assert needs_of("kill_all", {"wipe": "none", "restart": False}) == {"kill_node"}
    assert needs_of("kill_all", {}) == {"kill_node", "wipe_node_storage", "start_node"}   # defaults: wipe shm, restart


def test_refusal_names_only_the_variants_a_backend_cannot_do():
    no_shm = PRIMITIVES - {"shm_dir"}
    entries = [SimpleNamespace(id="c1", kind="corrupt_checkpoint", params={"tier": "nvme"}),
               SimpleNamespace(id="c2", kind="corrupt_checkpoint", params={"tier": "memory"}),
               SimpleNamespace(id="k", kind="kill_all", params={"wipe": "none"})]
    assert missing_primitives(entries, no_shm) == ["c2 (corrupt_checkpoint) needs shm_dir"]
    assert missing_primitives(entries[2:], frozenset({"kill_node"})) == ["k (kill_all) needs start_node"]


def test_list_cells_say_which_variants_a_backend_supports():
    assert support("corrupt_checkpoint", PRIMITIVES) == "yes"
    assert support("corrupt_checkpoint", PRIMITIVES - {"shm_dir"}) == "only tier=nvme"
    assert support("corrupt_checkpoint", PRIMITIVES - {"shm_dir", "nvme_dir"}) == "-"
    assert support("kill_all", PRIMITIVES - {"wipe_node_storage"}) == "only wipe=none"
    assert support("kill_all", frozenset({"kill_node"})) == "only wipe=none, restart=False, lose_unsynced_writes=False"
    assert support("link_down", frozenset()) == "yes"   # the proxy, not a cluster primitive


def test_chaosbench_list_reads_the_same_derivation(monkeypatch):
    from typer.testing import CliRunner

    from chaosbench.cli import app
    from chaosbench.cluster.slurm.backend import supported
    monkeypatch.delenv("CHAOSBENCH_SLURM_FORBID", raising=False)
    assert "nvme_dir" in supported() and "shm_dir" not in supported()   # a Slurm node's /dev/shm is not ours to see
    res = CliRunner().invoke(app, ["list", "--scenarios", "/nonexistent"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    at = max(i for i, line in enumerate(lines) if "corrupt_checkpoint" in line)   # the per-backend table
    cells = [c.strip() for c in lines[at].split("│")[1:-1]]
    for more in lines[at + 1:]:   # a cell rich wrapped onto the next line(s) of the same row
        extra = [c.strip() for c in more.split("│")[1:-1]]
        if len(extra) != len(cells) or extra[0]:
            break
        cells = [f"{c} {x}".strip() for c, x in zip(cells, extra)]
    assert cells == ["corrupt_checkpoint", "yes", "yes", "only tier=nvme", "yes"]   # docker, local, slurm, ray


def test_a_backend_without_the_clock_or_disk_hook_says_why():
    from chaosbench.cluster.slurm.backend import SlurmCluster
    for prim in ("skew_clock", "fault_disk"):
        assert prim not in SlurmCluster.supported_faults
        assert "use the docker" in SlurmCluster.unsupported_why[prim]
