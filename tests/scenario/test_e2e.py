"""End to end: `chaosbench run` on a real cluster (real torchrun, trainer, etcd/proxy/S3).

Backend: $CHAOSBENCH_BACKEND, else docker when usable, else local; skipped with the reason when
neither is usable here.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaosbench.observer.tail import read_events

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]


def backend() -> str:
    from chaosbench.cluster import available_backends
    why_not = available_backends()
    wanted = os.environ.get("CHAOSBENCH_BACKEND")
    for name in ([wanted] if wanted else ["docker", "local"]):
        if why_not.get(name, "unknown backend") is None:
            return name
    pytest.skip("no cluster backend usable here: " + "; ".join(f"{k}: {v}" for k, v in why_not.items()))


def chaosbench_run(scenario: Path, report_dir: Path):
    cmd = [sys.executable, "-m", "chaosbench.cli", "run", str(scenario), "--backend", backend(),
           "--report-dir", str(report_dir), "--quiet", "--seed", "1"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=840)
    (run_dir,) = list(report_dir.iterdir())
    return proc, run_dir, json.loads((run_dir / "result.json").read_text())


def test_node_loss_passes(tmp_path):
    proc, run_dir, result = chaosbench_run(ROOT / "scenarios" / "node_loss.yaml", tmp_path)
    assert proc.returncode == 0, f"report: {run_dir}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert result["verdict"] == "passed"
    (rec,) = result["recoveries"]
    assert rec["tier"] == "memory" and rec["world_size_after"] == 2 and rec["lost_steps"] <= 5
    assert all(c["status"] == "passed" for c in result["checks"])
    for name in ("scenario.yaml", "faults.jsonl", "junit.xml", "events", "logs"):
        assert (run_dir / name).exists(), name


def test_wrong_expectation_exits_1_and_says_why(tmp_path):
    proc, run_dir, result = chaosbench_run(ROOT / "tests" / "scenario" / "data" / "node_loss_wrong_tier.yaml",
                                           tmp_path)
    assert proc.returncode == 1, f"report: {run_dir}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    check = next(c for c in result["checks"] if c["name"] == "recovered_from")
    assert check["status"] == "failed" and "expected s3" in check["reason"] and "from memory" in check["reason"]
    assert "recovered_from FAILED" in proc.stdout and "expected s3" in proc.stdout


def test_corruption_without_digests_leaves_replicas_agree_not_evaluated_never_passed(tmp_path):
    # the bit flips (fault_fired) but nothing digests the parameters: no evidence, so no pass
    proc, run_dir, result = chaosbench_run(ROOT / "tests" / "scenario" / "data" / "silent_corruption_no_digests.yaml",
                                           tmp_path)
    assert proc.returncode == 1, f"report: {run_dir}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    check = next(c for c in result["checks"] if c["name"] == "replicas_agree")
    assert check["status"] == "not_evaluated", check
    assert "replica_digests" in check["reason"] and "cb.watch" in check["reason"], check
    events = "".join(p.read_text() for p in (run_dir / "events").glob("events-*.jsonl"))
    assert '"fault_fired"' in events and '"corrupt_replica"' in events
    assert '"param_digest"' not in events


def test_a_dirty_run_leaves_its_successor_a_clean_cluster(tmp_path):
    """Clusters are never reused (docs/harness-speed.md): a run that wrote S3 and NVMe checkpoints,
    corrupted one, filled a node's NVMe and left a node partitioned hands the next run of the same shape nothing:
    every rank starts fresh (no tier holds a checkpoint), node-1's NVMe has room, all 3 nodes train."""
    if backend() != "docker":
        pytest.skip("partition and fill_nvme are docker-backend faults here")
    dirty, clean = tmp_path / "dirty", tmp_path / "clean"
    dirty.mkdir()
    clean.mkdir()
    proc, run_dir, result = chaosbench_run(ROOT / "tests" / "scenario" / "data" / "dirty_predecessor.yaml", dirty)
    ev = read_events(run_dir / "events")
    assert any(e["event"] == "checkpoint_saved" and e.get("tier") == "s3" for e in ev), \
        f"the predecessor wrote no S3 checkpoint: {run_dir}"
    assert any(e["event"] == "checkpoint_failed" and e.get("tier") == "nvme" and e.get("node") == "node-1"
               for e in ev), f"no NVMe save failed on node-1 after the fill ({result['faults']}): {run_dir}"
    assert [f["type"] for f in result["faults"]] == ["fill_nvme", "corrupt_checkpoint", "partition"], result["faults"]
    assert all(f["injected_at"] and not f["error"] and f["healed_at"] is None for f in result["faults"]), \
        f"every fault injected and none healed: {result['faults']}"

    proc, run_dir, result = chaosbench_run(ROOT / "tests" / "scenario" / "data" / "clean_successor.yaml", clean)
    assert proc.returncode == 0, f"report: {run_dir}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    ev = read_events(run_dir / "events")
    fresh = {e["node"] for e in ev if e["event"] == "checkpoint_fresh_start"}
    assert fresh == {"node-0", "node-1", "node-2"}, "every rank starts with nothing to restore"
    assert not [e for e in ev if e["event"] == "checkpoint_loaded"], "a checkpoint of the predecessor was loaded"
    assert not [e for e in ev if e["event"] == "checkpoint_invalid"], "the predecessor's corrupted checkpoint was found"
    assert not [e for e in ev if e["event"] == "checkpoint_failed"], "a save failed (a full disk left behind?)"
    saved = {(e.get("node"), e.get("tier")) for e in ev if e["event"] == "checkpoint_saved"}
    assert {("node-1", "nvme"), ("node-2", "nvme")} <= saved and any(t == "s3" for _, t in saved), saved
    assert all(c["status"] == "passed" for c in result["checks"])
