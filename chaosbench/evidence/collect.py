"""What the runner gathers from a live cluster for the checks: inventories at fault injections, the
events, why the nodes exited, and the final checkpoint inventory (checkpoints.json).

Everything here does I/O against the cluster or the run directory; the checks (chaosbench/checks)
only read what it wrote. Evidence that could not be taken is written as such, never invented.
"""
from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from chaosbench.cluster.launch import S3_BUCKET
from chaosbench.evidence import late_writes
from chaosbench.evidence.inventory import take_inventory
from chaosbench.evidence.inventory_s3 import s3_inventory
from chaosbench.scenario.names import fault_file_name

Say = Callable[[str], None]
INVENTORY_WAIT_S = 120   # how long collection waits for an injection-time inventory still walking


def inventory_of(cluster, nodes: list[str]) -> dict:
    """Every node's memory and NVMe checkpoint directories plus the run's S3 bucket; what could
    not be located (a stopped container's /dev/shm, an NVMe without a host path) is listed as unseen."""
    roots, unseen = {}, {}
    for node in nodes:
        for tier, getter in (("nvme", cluster.nvme_dir), ("memory", cluster.shm_dir)):
            try:
                roots[f"{node}/{tier}"] = (tier, Path(getter(node)))
            except Exception as e:
                unseen[f"{node}/{tier}"] = (tier, f"{type(e).__name__}: {e}")
    try:
        s3 = s3_inventory(cluster.s3_endpoint, S3_BUCKET)
    except Exception as e:
        s3 = {"unseen": [{"node": "s3", "tier": "s3", "reason": f"{type(e).__name__}: {e}"}]}
    return take_inventory(roots, unseen, s3)


def inventory_at(cluster, run_dir: Path, fault_id: str) -> threading.Thread:
    """What the harness itself sees on the nodes right after a fault acted (inventories/<id>.json),
    taken in the background so the schedule (a heal due at once) is not delayed; the restore
    cross-check holds the trainer's checkpoint_loaded claims against it. Returns the walking thread."""
    path = Path(run_dir) / "inventories" / fault_file_name(fault_id)   # refuses a path-like id

    def take():
        try:
            inv = inventory_of(cluster, cluster.node_names())
        except Exception as e:   # evidence we could not take is said, never invented
            inv = {"files": [], "checkpoints": [], "unseen": [{"node": "*", "tier": "*",
                                                              "reason": f"{type(e).__name__}: {e}"}]}
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"fault_id": fault_id, **inv}, indent=1))
    t = threading.Thread(target=take, name=f"inventory-{fault_id}", daemon=True)
    t.start()
    return t


def collect_evidence(cluster, run_dir: Path, harness: dict, walking: list[threading.Thread], say: Say) -> None:
    """Logs and exit codes (the backend's collect()), the events and the final checkpoint inventory.
    Runs before teardown: it needs the live cluster. Nothing here reads the events: the analyse step
    (chaosbench/analyse.py) parses them once, and names the root cause of a run that ended badly."""
    if ids := cluster.record():   # backend ids for the run record (Slurm job and step ids)
        harness[cluster.backend] = ids
    try:
        cluster.collect()
    except Exception as e:   # keep what we have; the checks will say what is missing
        say(f"collect failed: {e}")
    try:
        copy_events(Path(cluster.events_dir), Path(run_dir) / "events")
        harness["collected_sizes"] = late_writes.mark(Path(run_dir))   # what nodes add later: teardown's
        harness["collected_at"] = time.time()   # a kept event is stamped before this (checks/record.py)
        nodes = cluster.node_names()
    except Exception as e:   # a cluster that never came up has nothing to copy
        say(f"events not collected: {type(e).__name__}: {e}")
        return
    for t in walking:   # the inventories taken at fault injections, still walking
        t.join(timeout=INVENTORY_WAIT_S)
    (Path(run_dir) / "checkpoints.json").write_text(json.dumps(inventory_of(cluster, nodes), indent=1))


def copy_events(src: Path, dst: Path) -> None:
    """The trainers' events and the node watcher's agent-*.jsonl, when the backend keeps them elsewhere."""
    if src.is_dir() and src.resolve() != dst.resolve():
        for f in src.glob("*.jsonl"):
            shutil.copy2(f, dst / f.name)
