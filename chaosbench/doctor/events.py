"""Read the trainers' per-rank event files (docs/events.md) into a per-rank summary."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

PHASES = ("config", "rendezvous", "process_group", "checkpoint_restore", "training", "shutdown")
PROGRESS = {"phase", "step", "checkpoint_loaded", "checkpoint_fresh_start", "run_complete", "topology_change",
            "worker_start"}


@dataclass
class RankState:
    file: str
    node: str
    local_rank: int | None = None
    rank: int | None = None
    world_size: int | None = None
    restart_count: int | None = None
    phase: str | None = None
    phase_since: float | None = None
    last_event: str | None = None
    last_ts: float | None = None
    last_progress_ts: float | None = None
    last_step: int | None = None
    last_step_ts: float | None = None
    ended: str | None = None          # "run_complete" | "fatal: ..." | "shutdown"

    def to_dict(self) -> dict:
        return asdict(self)


def events_dir_of(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    return run_dir / "events" if (run_dir / "events").is_dir() else run_dir


def read_lines(path: Path):
    """Yield parsed lines; a torn last line (killed writer) or garbage line is skipped, as the contract says."""
    with open(path, "rb") as f:
        for raw in f:
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if isinstance(ev, dict) and "event" in ev and isinstance(ev.get("ts"), (int, float)):
                yield ev


def _node_from_name(path: Path) -> str:
    stem = path.name[len("events-"):-len(".jsonl")]
    return stem.rsplit("-local", 1)[0]


def rank_states(events_dir: Path, until: float | None = None) -> list[RankState]:
    """`until`: ignore events stamped after it (a finished run's stop: see diagnose_run)."""
    states = []
    for path in sorted(Path(events_dir).glob("events-*.jsonl")):
        s = RankState(file=path.name, node=_node_from_name(path))
        for ev in read_lines(path):
            if until is not None and ev["ts"] > until:
                continue
            if s.restart_count is not None and ev.get("restart_count", 0) != s.restart_count:
                s.ended = None          # a new incarnation: earlier endings no longer apply
            for k in ("node", "local_rank", "rank", "world_size", "restart_count"):
                if ev.get(k) is not None:
                    setattr(s, k, ev[k])
            name, ts = ev["event"], float(ev["ts"])
            s.last_event, s.last_ts = name, ts
            if name in PROGRESS:
                s.last_progress_ts = ts
            if name == "phase":
                s.phase, s.phase_since = ev.get("phase"), ts
                if ev.get("phase") == "shutdown":
                    s.ended = s.ended or "shutdown"
            elif name == "step":
                s.last_step, s.last_step_ts = ev.get("step"), ts
                if s.phase != "training":
                    s.phase, s.phase_since = "training", ts
            elif name == "worker_start":   # node watcher (a job without phase events): started, nothing more known
                s.phase, s.phase_since, s.ended = "startup", ts, None
            elif name == "worker_exit" and not s.ended:
                s.ended = "exited"
            elif name == "fatal":
                s.ended = f"fatal: {ev.get('error_type') or ''} {ev.get('error') or ''}".strip()
            elif name == "run_complete":
                s.ended = "run_complete"
        states.append(s)
    return states
