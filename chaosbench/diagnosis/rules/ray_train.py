"""Ray Train's classic mistakes (backend ray, docs/ray.md), each from the run's own record:

- a `train_loop_per_worker` that never calls `ray.train.get_checkpoint()`: Ray Train restores nothing by
  itself, so after a failure the restarted group trains from step 0 although Ray offered it a checkpoint
  (the observed worker events: `ray_checkpoint_offered`, no `ray_get_checkpoint`, the first step again);
- `FailureConfig(max_failures=0)`, Ray Train's default: the first worker failure ends the run;
- a node-local `storage_path`: the checkpoints of a node Ray loses go with it;
- the head lost (`kill_ray_head`): the GCS, the Train controller and the driver go, and nothing restarts the run.
"""
from __future__ import annotations

from ..model import Evidence, Finding
from ..record import RunRecord

SHARED = ("shared", "s3")


def _ray(rec: RunRecord) -> dict | None:
    """The scenario's trainer.ray, or None for a run that is no Ray Train job."""
    ray = rec.trainer.get("ray")
    return ray if isinstance(ray, dict) else None


def _source(ev: dict) -> str:
    return f"events/events-{ev.get('node')}-local{ev.get('local_rank', 0)}-observed.jsonl"


def never_resumes(rec: RunRecord) -> list[Finding]:
    events = rec.events
    offered = [e for e in events if e.get("event") == "ray_checkpoint_offered" and e.get("path")]
    asked = {(e.get("restart_count"), e.get("rank")) for e in events if e.get("event") == "ray_get_checkpoint"}
    for offer in offered:
        start = offer.get("restart_count")
        if (start, offer.get("rank")) in asked or any(a[0] == start for a in asked):
            continue
        before = [e["step"] for e in events if e.get("event") == "step" and e.get("restart_count", 0) < (start or 0)
                  and isinstance(e.get("step"), int)]
        after = [e for e in events if e.get("event") == "step" and e.get("restart_count") == start
                 and isinstance(e.get("step"), int)]
        if not before or not after or after[0]["step"] > min(before):
            continue
        first = after[0]
        return [Finding(
            rule="ray_ignores_get_checkpoint",
            title=f"The Ray Train loop never calls ray.train.get_checkpoint(): after the worker group's restart "
                  f"{start} Ray offered it the checkpoint {offer['path']}, but the loop started again at step "
                  f"{first['step']} (it had reached step {max(before)}), so every failure loses all work so far.",
            fix="at the start of train_loop_per_worker: `checkpoint = ray.train.get_checkpoint()`; if it is not None, "
                "load the model, optimizer and step from `checkpoint.as_directory()` and continue from that step",
            effect="after a failure the group resumes at the step of the last reported checkpoint, losing at most "
                   "the steps since then",
            evidence=[Evidence(text=f"rank {offer.get('rank')}: ray_checkpoint_offered path={offer['path']} "
                                    f"(restart {start}); no ray_get_checkpoint in that group start",
                               source=_source(offer), ts=offer.get("ts")),
                      Evidence(text=f"rank {first.get('rank')}: step {first['step']} after the restart",
                               source=_source(first), ts=first.get("ts"))],
            severity="cause")]
    return []


def no_retries(rec: RunRecord) -> list[Finding]:
    ray = _ray(rec)
    if ray is None or ray.get("max_failures", 0) != 0 or not rec.faults:
        return []
    starts = {e.get("restart_count") for e in rec.events if e.get("event") in ("worker_start", "phase")}
    if len(starts) > 1:
        return []   # it restarted after all: another cause ended it
    return [Finding(
        rule="ray_max_failures_zero",
        title="FailureConfig(max_failures=0), Ray Train's default: the first worker failure after the fault ended "
              "the whole run instead of restarting the worker group.",
        fix="set `RunConfig(failure_config=FailureConfig(max_failures=N))` (N >= the failures a run must survive; "
            "-1: unlimited), in the scenario trainer.ray.max_failures",
        effect="the worker group restarts from the last checkpoint after each failure",
        evidence=[Evidence(text=f"trainer.ray.max_failures={ray.get('max_failures', 0)}; "
                                f"{len(rec.faults)} fault(s) injected", source="scenario.yaml")],
        severity="cause" if rec.result.get("verdict") == "failed" else "warning")]


def node_local_storage(rec: RunRecord) -> list[Finding]:
    ray = _ray(rec)
    nodes = (rec.scenario.get("cluster") or {}).get("nodes", 1)
    if ray is None or ray.get("storage", "shared") in SHARED or nodes < 2:
        return []
    return [Finding(
        rule="ray_node_local_storage",
        title=f"RunConfig(storage_path={ray['storage']!r}) is a path on each node, not storage they share: Ray Train "
              f"persists checkpoints there from whichever node reports them, so a lost node takes its checkpoints "
              f"with it and a restarted group on another node finds none.",
        fix="give storage_path on a filesystem every node mounts (NFS, Lustre) or cloud storage "
            "(s3://bucket/prefix, storage_filesystem for a custom endpoint); in the scenario trainer.ray.storage: "
            "shared or s3",
        effect="every checkpoint survives the loss of any node",
        evidence=[Evidence(text=f"trainer.ray.storage={ray['storage']} on {nodes} nodes", source="scenario.yaml")],
        severity="cause" if rec.result.get("verdict") == "failed" else "warning")]


def head_lost(rec: RunRecord) -> list[Finding]:
    lost = [f for f in rec.faults if f.get("type") == "kill_ray_head" and f.get("injected_at")]
    if not lost:
        return []
    fault = lost[0]
    before = [e["step"] for e in rec.events if e.get("event") == "step" and isinstance(e.get("step"), int)
              and (e.get("ts") or 0) <= fault["injected_at"]]
    at = f" at step {max(before)}" if before else ""
    return [Finding(
        rule="ray_head_lost",
        title=f"The Ray head was lost{at} ({fault.get('id')}: kill_ray_head): the GCS, the Train controller and the "
              f"driver ran there, so nothing was left to restart the worker group and the run ended; "
              f"FailureConfig(max_failures) covers worker and node failures only.",
        fix="start the driver again when it is lost: a Ray Job or KubeRay RayJob with retries, on a cluster whose head "
            "comes back, with the same RunConfig(name, storage_path) (Ray Train v2 resumes a run of that name from "
            "storage_path) and a loop that restores its newest checkpoint; GCS fault tolerance (an external Redis, "
            "RAY_REDIS_ADDRESS on the head) keeps the cluster's state across a head restart, not a driver that ran on it",
        effect="a lost head costs the time to bring the head and the driver back plus the steps since the last "
               "checkpoint, instead of the run",
        evidence=[Evidence(text=f"{fault.get('id')}: kill_ray_head injected", source="faults.jsonl",
                           ts=fault.get("injected_at"))],
        severity="cause" if rec.result.get("verdict") == "failed" else "warning")]


def check(rec: RunRecord) -> list[Finding]:
    if _ray(rec) is None and not any(e.get("event") == "ray_checkpoint_offered" for e in rec.events):
        return []
    return never_resumes(rec) + no_retries(rec) + node_local_storage(rec) + head_lost(rec)
