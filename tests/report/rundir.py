"""Build realistic run directories (docs/result.md layout) for report tests.

The story: 3 nodes × 1 proc train at 4 steps/s; node-2 is SIGKILLed at step 40 (it had reached
step 42); the survivors detect it, re-rendezvous at world size 2, restore step 40 from the memory
tier (node-0 locally, node-1 from its peer) and train on to step 120.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

T0 = 1_790_000_000.0
STEP_S = 0.25
KILL_STEP, LAST_BEFORE, RESTORED, END = 40, 42, 40, 120
HOSTILE = '<script>alert("pwned")</script> & <img src=x onerror=alert(1)> </pre></details>'


def _ev(ts, node, rank, ws, rc, event, **extra) -> dict[str, Any]:
    return {"ts": round(ts, 3), "event": event, "node": node, "rank": rank, "local_rank": 0,
            "world_size": ws, "restart_count": rc, "pid": 1000 + rank + 10 * rc, "run_id": "node_loss-test",
            **extra}


def build(run_dir: Path, *, passing: bool = True, hostile: bool = True) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "events").mkdir(exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    kill_at = T0 + 2.0 + LAST_BEFORE * STEP_S
    detected, rdzv_done, restored, first_step = kill_at + 0.8, kill_at + 2.9, kill_at + 3.3, kill_at + 3.6
    events: dict[str, list] = {f"node-{i}": [] for i in range(3)}
    tl: dict[str, list] = {"steps": [], "world_size": [[T0 + 2.0, 3]], "restarts": [], "rendezvous": [],
                           "checkpoints": []}
    nvme_errors = []
    for i in range(3):
        node, e = f"node-{i}", events[f"node-{i}"]
        e.append(_ev(T0 + 0.5, node, i, 3, 0, "phase", phase="rendezvous"))
        tl["rendezvous"].append({"ts": T0 + 0.5, "node": node})
        e.append(_ev(T0 + 1.5, node, i, 3, 0, "checkpoint_fresh_start", reason="no checkpoint anywhere"))
        e.append(_ev(T0 + 1.9, node, i, 3, 0, "phase", phase="training"))
        for step in range(1, LAST_BEFORE + 1):
            ts = T0 + 2.0 + step * STEP_S
            e.append(_ev(ts, node, i, 3, 0, "step", step=step, loss=6.0 - step * 0.02, samples_seen=step * 24,
                         step_time_s=STEP_S, global_batch=24, accum_steps=1))
            tl["steps"].append({"ts": ts, "node": node, "rank": i, "step": step, "world_size": 3,
                                "restart_count": 0, "loss": 6.0 - step * 0.02})
            for tier, every in (("memory", 5), ("nvme", 20)):
                if step % every == 0:
                    ok = passing or tier != "nvme"
                    if ok:
                        e.append(_ev(ts + 0.01, node, i, 3, 0, "checkpoint_saved", tier=tier, step=step,
                                     bytes=52_000_000, stall_s=0.012, total_s=0.05 if tier == "memory" else 0.4))
                    else:
                        err = f"[NVME] step {step}: [Errno 28] No space left on device: '/nvme/ckpt-{step}.tmp'"
                        nvme_errors.append(err)
                        e.append(_ev(ts + 0.01, node, i, 3, 0, "checkpoint_failed", tier=tier, step=step, error=err))
                    tl["checkpoints"].append({"ts": ts + 0.01, "node": node, "tier": tier, "step": step, "ok": ok})
    for i in range(2):  # survivors
        node, e = f"node-{i}", events[f"node-{i}"]
        e.append(_ev(detected, node, i, 3, 0, "health_check_failed", error="gloo: connection reset by peer",
                     timeout_s=2.0))
        e.append(_ev(rdzv_done - 1.0, node, i, 2, 1, "phase", phase="rendezvous"))
        tl["restarts"].append({"ts": rdzv_done - 1.0, "node": node, "restart_count": 1})
        tl["rendezvous"].append({"ts": rdzv_done - 1.0, "node": node})
        e.append(_ev(rdzv_done + 0.05, node, i, 2, 1, "topology_change", old_world_size=3, new_world_size=2))
        e.append(_ev(restored, node, i, 2, 1, "checkpoint_loaded", tier="memory", step=RESTORED,
                     source="local" if i == 0 else "peer", duration_s=0.4, checksum_ok=True, bytes=52_000_000))
        for step in range(RESTORED + 1, END + 1):
            ts = first_step + (step - RESTORED - 1) * STEP_S
            e.append(_ev(ts, node, i, 2, 1, "step", step=step, loss=6.0 - step * 0.02, samples_seen=step * 16,
                         step_time_s=STEP_S, global_batch=16, accum_steps=1))
            tl["steps"].append({"ts": ts, "node": node, "rank": i, "step": step, "world_size": 2,
                                "restart_count": 1, "loss": 6.0 - step * 0.02})
            if step % 5 == 0:
                e.append(_ev(ts + 0.01, node, i, 2, 1, "checkpoint_saved", tier="memory", step=step,
                             bytes=52_000_000, stall_s=0.012, total_s=0.05))
                tl["checkpoints"].append({"ts": ts + 0.01, "node": node, "tier": "memory", "step": step, "ok": True})
            if step % 40 == 0 and i == 0:
                tl["checkpoints"].append({"ts": ts + 0.5, "node": node, "tier": "s3", "step": step, "ok": True})
        e.append(_ev(ts + 0.1, node, i, 2, 1, "run_complete", step=END))
    tl["world_size"].append([first_step, 2])
    for node, lines in events.items():
        text = "\n".join(json.dumps(x) for x in lines) + "\n"
        if node == "node-2":
            text += '{"ts": 17, "event": "st'  # torn last line of a SIGKILLed writer
        (run_dir / "events" / f"events-{node}-local0.jsonl").write_text(text)
        log = [f"[{node}] INFO trainer: step {s} loss {6.0 - s * 0.02:.3f}" for s in range(1, 43)]
        if hostile:
            log.append(f"[{node}] WARNING data: odd sample text {HOSTILE}")
        (run_dir / "logs" / f"{node}.log").write_text("\n".join(log) + "\n")
    (run_dir / "logs" / "etcd.log").write_text("etcd: ready to serve client requests\n")
    finished = first_step + (END - RESTORED) * STEP_S + 1.0
    recovery = {
        "fault_id": "f1", "injected_at": kill_at, "detected_at": detected, "rendezvous_done_at": rdzv_done,
        "restored_at": restored, "first_step_at": first_step, "detection_s": 0.8, "rendezvous_s": 2.1,
        "restore_s": 0.4, "first_step_s": 0.3, "total_s": 3.6, "tier": "memory", "restored_step": RESTORED,
        "source": "peer", "bytes": 52_000_000, "restore_duration_s": 0.4, "step_before_fault": LAST_BEFORE,
        "lost_steps": LAST_BEFORE - RESTORED, "world_size_before": 3, "world_size_after": 2,
    }
    checks = [
        {"name": "recovered_from", "status": "passed" if passing else "failed",
         "expected": "memory" if passing else "s3", "observed": "memory",
         "reason": "restored step 40 from memory (peer) on all ranks", "optional": False},
        {"name": "max_lost_steps", "status": "passed", "expected": 5, "observed": 2,
         "reason": "lost 2 steps (42 → 40)", "optional": False},
        {"name": "max_recovery_seconds", "status": "passed", "expected": 30, "observed": 3.6,
         "reason": "detection 0.8 s, rendezvous 2.1 s, restore 0.4 s, first step 0.3 s", "optional": False},
        {"name": "world_size_after", "status": "passed", "expected": 2, "observed": 2, "reason": "", "optional": False},
        {"name": "reaches_step", "status": "passed", "expected": 120, "observed": 120, "reason": "", "optional": False},
    ]
    if not passing:
        checks += [
            {"name": "loss_continuity", "status": "not_evaluated", "expected": "continuous", "observed": None,
             "reason": "no step events before the restore on rank 1", "optional": False},
            {"name": "log_regex:no_nccl_warning", "status": "not_evaluated", "expected": "no match",
             "observed": None, "reason": "no logs collected for node-2", "optional": True},
        ]
    result = {
        "schema_version": 1, "run_id": run_dir.name,
        "scenario": {"name": "node_loss", "file": "scenarios/node_loss.yaml",
                     "description": "Lose one of three nodes mid-run; survivors resume from memory."},
        "backend": "local",
        "cluster": {"nodes": 3, "procs_per_node": 1, "min_nodes": 2, "max_nodes": 3, "rendezvous": "etcd-v3"},
        "seed": 1234, "command": "chaosbench run scenarios/node_loss.yaml --backend local --seed 1234",
        "started_at": T0, "finished_at": finished, "duration_s": finished - T0,
        "verdict": "passed" if passing else "failed", "error": None,
        "faults": [{"id": "f1", "type": "kill_node", "target": "node-2", "trigger": "at step 40",
                    "params": {"signal": "SIGKILL"}, "injected_at": kill_at, "healed_at": None}],
        "recoveries": [recovery],
        "checks": checks,
        "checkpoints": {
            "memory": {"saves": 56, "failures": 0, "skipped": 0, "errors": [], "stall_s_median": 0.012,
                       "total_s_median": 0.05, "bytes_median": 52_000_000, "throughput_mb_s": 1040.0},
            "nvme": ({"saves": 6, "failures": 0, "skipped": 0, "errors": [], "stall_s_median": 0.012,
                      "total_s_median": 0.4, "bytes_median": 52_000_000, "throughput_mb_s": 130.0} if passing else
                     {"saves": 0, "failures": len(nvme_errors), "skipped": 0, "errors": nvme_errors,
                      "stall_s_median": None, "total_s_median": None, "bytes_median": None,
                      "throughput_mb_s": None}),
            "s3": {"saves": 2, "failures": 0, "skipped": 0, "errors": [], "stall_s_median": 0.0,
                   "total_s_median": 1.9, "bytes_median": 52_000_000, "throughput_mb_s": 27.4},
        },
        "timeline": tl,
        "goodput": {"baseline_steps_per_s": 4.0, "overall_steps_per_s": 3.52, "ratio": 0.88},
        "files": {"report": "report.html", "junit": "junit.xml", "events": "events", "logs": "logs"},
    }
    (run_dir / "result.json").write_text(json.dumps(result, indent=1))
    (run_dir / "faults.jsonl").write_text(json.dumps({"ts": kill_at, "id": "f1", "fault": "kill_node", "action": "inject",
                                                      "target": "node-2", "params": {"signal": "SIGKILL"}}) + "\n")
    (run_dir / "exits.json").write_text(json.dumps({"node-2": [{"incarnation": 0, "exit_code": -9}]}))
    return run_dir
