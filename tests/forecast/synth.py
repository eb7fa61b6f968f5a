"""Minimal result.json fixtures with the shape `chaosbench run` writes (docs/result.md), for the forecast."""
from __future__ import annotations

import json
from pathlib import Path

FAULTS = {"node_loss": ("kill_node", {"node": "node-2"}), "worker_crash": ("kill_worker", {"node": "node-1"}),
          "hung_rank": ("partition", {"node": "node-2"}), "full_restart": ("kill_all", {"wipe": "shm"}),
          "new_machines": ("kill_all", {"wipe": "all"})}
TIER_OF = {"node_loss": "memory", "worker_crash": "memory", "hung_rank": "memory", "full_restart": "nvme",
           "new_machines": "s3"}


def make_result(klass: str = "node_loss", phases=(0.1, 0.6, 0.2, 0.05), nodes: int = 3, rate: float = 10.0,
                slow_after_s: float = 0.0, tier: str | None = None, recovered: bool = True,
                join: tuple[float, float, int] | None = None, second_fault_at: float | None = None) -> dict:
    """One fault at t=10 s on a job stepping `rate` steps/s; `slow_after_s` of no progress after the first step.
    join=(after_s, pause_s, redo): the survivors resume on nodes-1, and `after_s` after their first step the
    replacement's join pauses everyone `pause_s` (first step to first step) and rolls `redo` steps back.
    second_fault_at: a second fault (recovery not recorded) at that time."""
    tier = tier or TIER_OF[klass]
    kind, params = FAULTS[klass]
    t_fault, step_before = 10.0, int(10 * rate)
    steps = [{"ts": i / rate, "node": "node-0", "rank": 0, "step": i, "world_size": nodes, "restart_count": 0}
             for i in range(1, step_before + 1)]
    restored = step_before - 2
    first = t_fault + sum(phases)
    t, s, ws, joined = first, restored + 1, (nodes - 1 if join else nodes), False
    while t < first + 40 + (join[1] if join else 0.0):
        steps.append({"ts": t, "node": "node-0", "rank": 0, "step": s, "world_size": ws, "restart_count": 1})
        t += 1 / rate + (slow_after_s if s == restored + 1 else 0.0)
        s += 1
        if join and not joined and t >= first + join[0]:
            joined, ws = True, nodes
            t += join[1] - 1 / rate
            s -= join[2]
    det, rdzv, rest, fs = phases
    rec = {"fault_id": "f1", "injected_at": t_fault, "detection_s": det, "rendezvous_s": rdzv, "restore_s": rest,
           "first_step_s": fs, "total_s": round(sum(phases), 3) if recovered else None, "first_step_at": first,
           "tier": tier, "restored_step": restored, "step_before_fault": step_before, "lost_steps": 2,
           "world_size_before": nodes, "world_size_after": nodes - 1 if join else nodes, "problems": [], "claims": []}
    cps = [{"ts": i / rate, "node": "node-0", "tier": tt, "step": i, "ok": True}
           for tt, every in (("memory", 5), ("nvme", 20), ("s3", 50)) for i in range(every, step_before + 1, every)]
    tier_stats = {tt: {"saves": 10, "failures": 0, "skipped": 0, "errors": [], "stall_s_median": st,
                       "total_s_median": tot, "bytes_median": 1_734_101, "throughput_mb_s": 50.0}
                  for tt, st, tot in (("memory", 0.003, 0.02), ("nvme", 0.01, 0.06), ("s3", 0.01, 0.5))}
    return {"schema_version": 1, "run_id": f"{klass}-fixture", "scenario": {"name": klass},
            "backend": "local", "cluster": {"nodes": nodes, "procs_per_node": 1, "min_nodes": 2, "max_nodes": nodes,
                                            "rendezvous": "etcd-v3"},
            "seed": 0, "command": "", "started_at": 0.0, "verdict": "passed",
            "faults": [{"id": "f1", "type": kind, "target": params.get("node", ""), "params": params,
                        "injected_at": t_fault}]
            + ([{"id": "f2", "type": "kill_worker", "target": "node-1", "params": {}, "injected_at": second_fault_at}]
               if second_fault_at is not None else []),
            "recoveries": [rec], "checks": [], "checkpoints": tier_stats,
            "timeline": {"steps": steps, "checkpoints": cps}, "goodput": {"baseline_steps_per_s": rate}}


def write_run(root: Path, name: str, result: dict) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "result.json").write_text(json.dumps(result))
    return d


def preset_runs(root: Path) -> list[Path]:
    """A measured run of each class the presets use."""
    return [write_run(root, k, make_result(k)) for k in ("node_loss", "worker_crash", "hung_rank", "full_restart")]
