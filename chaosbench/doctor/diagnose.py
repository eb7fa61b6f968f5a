"""Explain a stuck run from what it recorded: events per rank, agent logs, fault log, and (optionally)
the live rendezvous state. `chaosbench doctor --run` calls `diagnose_run`. `is_stuck` is the same
judgement as a yes/no for a caller that polls a live run (only tests call it today); the scenario
engine does not: it stops a run that makes no progress by its own rule (scenario/stop.py, `stuck_after_s`)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from chaosbench.diagnosis.agent_logs import AgentLog, read_agent_logs
from .events import PHASES, RankState, events_dir_of, rank_states

DEFAULT_TIMEOUT_S = 60.0


@dataclass
class Diagnosis:
    run_dir: str
    now: float
    stuck: bool
    phase: str | None                 # the phase the run is stuck in (or failed/complete/running)
    cause: str
    evidence: list[str] = field(default_factory=list)
    fix: str = ""
    ranks: list[RankState] = field(default_factory=list)
    expected_nodes: list[str] = field(default_factory=list)
    missing_nodes: list[str] = field(default_factory=list)
    agent_logs: dict[str, AgentLog] = field(default_factory=dict)
    rendezvous: dict | None = None

    def to_dict(self) -> dict:
        return {"run_dir": self.run_dir, "now": self.now, "stuck": self.stuck, "phase": self.phase,
                "cause": self.cause, "evidence": self.evidence, "fix": self.fix,
                "ranks": [r.to_dict() for r in self.ranks], "expected_nodes": self.expected_nodes,
                "missing_nodes": self.missing_nodes,
                "agent_logs": {k: v.to_dict() for k, v in self.agent_logs.items()}, "rendezvous": self.rendezvous}


def _expected_nodes(run_dir: Path, given) -> list[str]:
    if isinstance(given, int):
        return [f"node-{i}" for i in range(given)]
    if given:
        return list(given)
    for name, path in (("result.json", ("cluster", "nodes")), ("scenario.yaml", ("cluster", "nodes"))):
        f = run_dir / name
        if f.is_file():
            try:
                data = json.loads(f.read_text()) if name.endswith(".json") else yaml.safe_load(f.read_text())
                n = int(data[path[0]][path[1]])
                return [f"node-{i}" for i in range(n)]
            except (ValueError, KeyError, TypeError, yaml.YAMLError):
                continue
    return []


def _open_faults(run_dir: Path) -> list[dict]:
    f = run_dir / "faults.jsonl"
    if not f.is_file():
        return []
    open_ = {}
    for line in f.read_text(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        key = (ev.get("fault"), json.dumps(ev.get("target"), sort_keys=True))
        if ev.get("action") == "inject":
            open_[key] = ev
        elif ev.get("action") == "heal":
            open_.pop(key, None)
    return list(open_.values())


def _ago(now: float, ts: float | None) -> str:
    return "never" if ts is None else f"{now - ts:.0f} s ago"


def _stopped_at(run_dir: Path) -> float | None:
    try:
        stopped = json.loads((run_dir / "harness.json").read_text()).get("stopped_at")
    except (OSError, ValueError, AttributeError):
        return None
    return float(stopped) if isinstance(stopped, (int, float)) else None


def diagnose_run(run_dir, now: float | None = None, no_progress_timeout_s: float = DEFAULT_TIMEOUT_S,
                 expected_nodes=None, rendezvous: dict | None = None) -> Diagnosis:
    """`rendezvous`: live state from `rdzv_probe.c10d_state`, if the caller could read it."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: run directory not found (expected reports/<run-id>/)")
    until = None
    if now is None:
        # a finished run is judged as it stood when the harness stopped it: a line observed during the
        # teardown (a frozen node's watcher thawed by the heal at stop stamps what it reads then) is
        # not progress the run made
        until = _stopped_at(run_dir)
        now = time.time() if until is None else until
    ranks = rank_states(events_dir_of(run_dir), until)
    logs = read_agent_logs(run_dir / "logs", now) if (run_dir / "logs").is_dir() else {}
    expected = _expected_nodes(run_dir, expected_nodes)
    with_events = {r.node for r in ranks}
    missing = [n for n in expected if n not in with_events and n not in logs]
    # an agent that logged after its workers' last event (or has no workers yet) is between incarnations:
    # with no join-attempt line either it runs without LOGLEVEL=INFO or it is still starting
    waiting = {n: lg for n, lg in logs.items()
               if (lg.in_rendezvous or n not in with_events)
               and all((r.last_ts or 0) < now - lg.age_s for r in ranks if r.node == n)}
    d = Diagnosis(str(run_dir), now, False, None, "", ranks=ranks, expected_nodes=expected,
                  missing_nodes=missing, agent_logs=logs, rendezvous=rendezvous)
    ev = d.evidence
    for r in ranks:
        since = f" for {now - r.phase_since:.0f} s" if r.phase_since else ""
        step = f", last step {r.last_step} {_ago(now, r.last_step_ts)}" if r.last_step is not None else ""
        end = f", ended: {r.ended}" if r.ended else ""
        ev.append(f"{r.node} rank {r.rank} (restart {r.restart_count}, world {r.world_size}) has been in "
                  f"{r.phase or 'no phase yet'}{since}{step}; last wrote an event ({r.last_event}) "
                  f"{_ago(now, r.last_ts)}{end}")
    def waited(lg) -> float:
        return now - lg.rdzv_since if lg.rdzv_since else lg.age_s

    for n, lg in waiting.items():
        if lg.in_rendezvous:
            how = f"for {waited(lg):.0f} s" if lg.rdzv_since else f"for >= {lg.age_s:.0f} s (log quiet since)"
            ev.append(f"{n} has been in rendezvous {how}: its torchrun agent is waiting for peers and started no "
                      f"worker (log: {lg.last_rdzv_line})")
        else:
            ev.append(f"{n}: torchrun agent log written {lg.age_s:.0f} s ago, no worker events and no rendezvous "
                      f"line (run torchrun with LOGLEVEL=INFO to log rendezvous progress); last line: {lg.last_line}")
    for n in missing:
        ev.append(f"{n}: no events and no agent log — the node never started")
    if rendezvous and "error" in rendezvous:
        ev.append(f"rendezvous store could not be read: {rendezvous['error']}")
    elif rendezvous:
        joined = rendezvous.get("participants", [])
        where = rendezvous.get("source", "rendezvous store")
        ev.append(f"{where} shows {len(joined)} of {len(expected) or '?'} nodes joined"
                  + (f" round {rendezvous['round']} (complete={rendezvous.get('complete')})" if "round" in rendezvous
                     else f" (closed={rendezvous.get('closed')})") + f": {', '.join(joined) or 'none'}"
                  + (f"; waiting to join the next round: {rendezvous['wait_list']}" if rendezvous.get("wait_list")
                     else ""))
    for f in _open_faults(run_dir):
        ev.append(f"fault {f.get('fault')} on {f.get('target')} injected {_ago(now, f.get('ts'))}, not healed")

    fatal = [r for r in ranks if r.ended and r.ended.startswith("fatal")]
    live = [r for r in ranks if not r.ended]
    if ranks and all(r.ended == "run_complete" for r in ranks) and not missing:
        d.phase, d.cause = "complete", "the run completed (every rank wrote run_complete)"
        return d
    if missing or (waiting and not live):
        joined = len(expected) - len(missing) if expected else len(logs)
        in_rdzv = [now - (r.last_progress_ts or now) for r in live if r.phase == "rendezvous"]
        longest = max([waited(lg) for lg in waiting.values()] + in_rdzv, default=0.0)
        d.phase = "rendezvous"
        # stuck once the waiting has lasted the timeout; with no trace of any node at all, at once
        d.stuck = longest >= no_progress_timeout_s or (not ranks and not logs)
        who = ", ".join(missing) or "no node"
        d.cause = (f"stuck in rendezvous: {joined} of {len(expected) or '?'} nodes started; {who} never started"
                   + (f"; the others have waited {longest:.0f} s" if longest else ""))
        d.fix = (f"start {who} (or lower the elastic minimum, --nnodes MIN:MAX, so the others can go on "
                 "without it); check it can reach the rendezvous endpoint: `chaosbench doctor --env` on that node")
        return d
    if fatal and not live:
        r = fatal[0]
        d.phase, d.cause = "failed", f"{r.node} rank {r.rank} exited with {r.ended}"
        d.fix = "read the error above and that node's log in logs/"
        return d
    progress = [r.last_progress_ts for r in live if r.last_progress_ts is not None]
    if not progress:
        d.phase, d.cause = None, "no events recorded yet"
        return d
    idle = now - max(progress)
    lagging = min(live, key=lambda r: (PHASES.index(r.phase) if r.phase in PHASES else -1, r.last_progress_ts or 0))
    d.phase = lagging.phase or "startup"
    if idle < no_progress_timeout_s:
        d.cause = f"making progress (last progress {idle:.0f} s ago, phase {d.phase})"
        if fatal:
            d.cause += f"; {fatal[0].node} rank {fatal[0].rank} exited with {fatal[0].ended}"
        return d
    d.stuck = True
    d.cause = (f"stuck in {d.phase}: no rank has made progress for {idle:.0f} s; {lagging.node} rank "
               f"{lagging.rank} has been in {d.phase} for {now - (lagging.phase_since or now):.0f} s")
    if fatal:
        d.cause += f"; {fatal[0].node} rank {fatal[0].rank} exited with {fatal[0].ended}"
    d.fix = {
        "rendezvous": "a node is missing or cannot reach the rendezvous endpoint: check every node's agent log",
        "process_group": "a peer cannot connect for the collective bootstrap: check MASTER_ADDR/PORT reachability "
                         "and NCCL/GLOO_SOCKET_IFNAME (`chaosbench doctor --env` on each node)",
        "checkpoint_restore": "restore is slow or hung: check the checkpoint storage (NVMe full? S3 reachable?)",
        "training": "a collective is hung (silent peer): check the health-check timeout and the network",
    }.get(d.phase, "check the agent logs in logs/")
    return d


def is_stuck(events_dir, no_progress_timeout_s: float, now: float | None = None,
             started_at: float | None = None) -> tuple[bool, str]:
    """(True, "stuck in <phase>: ...") when no rank progressed for the timeout.

    With no events at all, a run counts as stuck once `started_at` is older than the timeout (the workers
    never started: rendezvous never completed)."""
    now = time.time() if now is None else now
    ranks = rank_states(Path(events_dir)) if Path(events_dir).is_dir() else []
    if not ranks:
        if started_at is not None and now - started_at >= no_progress_timeout_s:
            return True, (f"stuck in rendezvous: no worker wrote an event in {now - started_at:.0f} s "
                          "(rendezvous never completed or workers never started)")
        return False, "no events yet"
    live = [r for r in ranks if not r.ended]
    if not live:
        if all(r.ended == "run_complete" for r in ranks):
            return False, "every rank ended"
        # every worker exited with an error: torchrun restarts them, unless that restart hangs
        idle = now - max(r.last_ts or 0.0 for r in ranks)
        if idle < no_progress_timeout_s:
            return False, f"every worker exited {idle:.0f} s ago; waiting for a restart"
        ended = "; ".join(f"{r.node} rank {r.rank}: {r.ended}" for r in ranks)
        return True, (f"stuck in rendezvous: no worker came back {idle:.0f} s after all exited "
                      f"(timeout {no_progress_timeout_s:.0f} s); {ended}")
    last = max((r.last_progress_ts or 0.0) for r in live)
    idle = now - last
    if idle < no_progress_timeout_s:
        return False, f"last progress {idle:.0f} s ago"
    lag = min(live, key=lambda r: (PHASES.index(r.phase) if r.phase in PHASES else -1, r.last_progress_ts or 0))
    phase = lag.phase or "startup"
    return True, (f"stuck in {phase}: no progress for {idle:.0f} s (timeout {no_progress_timeout_s:.0f} s); "
                  + "; ".join(f"{r.node} rank {r.rank} in {r.phase} since {_ago(now, r.phase_since)}, last event "
                              f"{_ago(now, r.last_ts)}" for r in live))
