"""A worker the kernel OOM-killed on a node squeezed by memory_pressure. The evidence is the kernel's own
count, which the fault's heal record carries (`oom_kills`: the node's memory cgroup counter before and
after; `docker_oom_events` where the counter could not be read): without a count above zero this rule
says nothing. The node's log then says how the worker went (torchrun's `exitcode: -9`) and whether its
agent restarted it; the title claims only what those lines show."""
from __future__ import annotations

import re

from ..model import Evidence, Finding
from ..record import RunRecord

SIGKILLED = re.compile(r"failed \(exitcode: -9\)|Signal 9 \(SIGKILL\)")
RESTARTED = re.compile(r"will restart worker group|restart_count=[1-9]")


def _kills(params: dict) -> int:
    for key in ("oom_kills", "docker_oom_events"):   # the cgroup's count first; docker's events where it had none
        n = params.get(key)
        if isinstance(n, int) and not isinstance(n, bool):
            return n
    return 0


def check(rec: RunRecord) -> list[Finding]:
    out = []
    injected = {r.get("id"): r.get("ts") for r in rec.faults_log if r.get("action") == "inject"}
    for heal in rec.faults_log:
        params = heal.get("params") if isinstance(heal.get("params"), dict) else {}
        t0 = injected.get(heal.get("id"))
        if heal.get("fault") != "memory_pressure" or heal.get("action") != "heal" or not isinstance(t0, (int, float)):
            continue
        kills = _kills(params)
        if kills <= 0:
            continue
        node, fid, limit = heal.get("target"), heal.get("id"), params.get("limit_mb")
        after = [ln for ln in rec.logs.get(node, []) if ln.ts is not None and ln.ts >= t0 - 1]
        sigkill = next((ln for ln in after if SIGKILLED.search(ln.text)), None)
        restart = next((ln for ln in after if sigkill and ln.n > sigkill.n and RESTARTED.search(ln.text)), None)
        what = "a worker" if kills == 1 else f"{kills} processes"
        title = (f"{node}: the kernel OOM-killed {what} (memory limit {limit} MiB set by memory_pressure {fid})"
                 if limit is not None else f"{node}: the kernel OOM-killed {what} (memory_pressure {fid})")
        if sigkill:
            title += "; the worker exited by SIGKILL" + (" and its agent restarted it" if restart else "")
        rec_ = next((r for r in rec.recoveries if r.get("fault_id") == fid), None)
        total = rec_.get("total_s") if rec_ else None
        held = params.get("held_mb")
        evidence = [Evidence(text=f"memory_pressure {fid} on {node}: limit {limit} MiB"
                                  + (f" (its processes held {held} MiB)" if held is not None else "")
                                  + f"; OOM kills counted by the kernel: {params.get('oom_kills')}, docker oom "
                                    f"events: {params.get('docker_oom_events')}", source="faults.jsonl", ts=heal.get("ts"))]
        evidence += [ln.evidence() for ln in (sigkill, restart) if ln]
        out.append(Finding(
            rule="oom_killed_worker",
            title=title + ".",
            fix="give the node more memory than the job's peak (agent, warm-start server and worker together), "
                "or shrink what the worker holds in host memory (batch size, snapshot copies: "
                "checkpoint.max_snapshots); an OOM kill is a worker crash the agent restarts from memory",
            effect=(f"no OOM kill; this one cost a restart of {total:.1f} s" if isinstance(total, (int, float))
                    else "no OOM kill, no restart"),
            evidence=evidence,
            severity="warning"))
    return out
