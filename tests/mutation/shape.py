"""The shape of a recorded run as the operators need it: worker process lifetimes (incarnations),
the rounds they trained in together, the world steps of a round, and the quiet stretches of steady
training away from any fault. Deliberately simple and separate from the checks' own model: an
operator must not inherit the blind spots of the code it attacks."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from tests.mutation.record import Record


class NotApplicable(Exception):
    """The run has no such feature (no restore in a run without faults, no digests, ...)."""


@dataclass
class Inc:
    file: str
    events: list[dict] = field(default_factory=list)

    @property
    def steps(self) -> list[dict]:
        return [e for e in self.events if e.get("event") == "step" and isinstance(e.get("step"), int)]

    @property
    def rank(self) -> int | None:
        return next((e.get("rank") for e in self.events if e.get("rank") is not None), None)

    @property
    def world_size(self) -> int | None:
        return next((e.get("world_size") for e in self.events if e.get("world_size") is not None), None)

    @property
    def start(self) -> float:
        return self.events[0]["ts"]

    @property
    def end(self) -> float:
        return self.events[-1]["ts"]


def incarnations(rec: Record) -> list[Inc]:
    """One per worker process: a new (pid, restart_count) in a file, or the node watcher's worker_start."""
    out = []
    for name, lines in rec.files.items():
        if not name.startswith("events-"):
            continue
        cur, key = None, None
        for ev in sorted((x for x in lines if isinstance(x, dict)), key=lambda e: e.get("ts", 0.0)):
            k = (ev.get("pid"), ev.get("restart_count"))
            if cur is None or k != key or (ev.get("event") == "worker_start" and cur.events) or \
                    (ev.get("event") == "phase" and ev.get("phase") == "config" and cur.events):
                cur, key = Inc(name), k
                out.append(cur)
            cur.events.append(ev)
    return out


def rounds(rec: Record) -> list[list[Inc]]:
    """Processes that trained together: a process joins the round when it started before the round's
    first process ended."""
    out: list[list[Inc]] = []
    first_end = None
    for inc in sorted((i for i in incarnations(rec) if i.steps), key=lambda i: i.start):
        if first_end is None or inc.start > first_end:
            out.append([inc])
            first_end = inc.end
        else:
            out[-1].append(inc)
            first_end = min(first_end, inc.end)
    return out


def world_steps(rnd: list[Inc]) -> list[tuple[int, float]]:
    """(step, when its last rank reported it) for the steps every process of the round reported."""
    per = [{e["step"]: e["ts"] for e in reversed(i.steps)} for i in rnd]
    common = set.intersection(*(set(p) for p in per))
    return sorted((s, max(p[s] for p in per)) for s in common)


def step_time(rec: Record) -> float:
    """The median time between a process's consecutive steps."""
    gaps = [b["ts"] - a["ts"] for i in incarnations(rec) for a, b in zip(i.steps, i.steps[1:])
            if b["step"] == a["step"] + 1]
    return statistics.median(gaps) if gaps else 0.1


def _near_fault(rec: Record, ts: float) -> bool:
    heal = {f.get("id"): f["ts"] for f in rec.faults if f.get("action") == "heal"}
    for f in rec.injections():
        end = heal.get(f.get("id"), f["ts"])
        if f["ts"] - 1.0 <= ts <= end + 2.0:
            return True
    return False


def steady(rec: Record, rnd: list[Inc], before: int = 5, after: int = 3) -> list[tuple[int, float]]:
    """World steps of steady training: well inside the round, away from any fault, before the stop."""
    ws = world_steps(rnd)
    stop = (rec.harness or {}).get("stopped_at", float("inf")) if isinstance(rec.harness, dict) else float("inf")
    return [w for w in ws[before:len(ws) - after] if not _near_fault(rec, w[1]) and w[1] < stop - 1.0]


def pick_steady(rec: Record, rng, last_round: bool = False, min_ranks: int = 1) -> tuple[list[Inc], int, float]:
    """A round and one of its steady world steps (step, ts); the last such round when asked."""
    cands = [(r, steady(rec, r)) for r in rounds(rec) if len(r) >= min_ranks]
    cands = [(r, s) for r, s in cands if s]
    if not cands:
        raise NotApplicable(f"no steady training with {min_ranks}+ ranks away from the faults")
    rnd, ws = cands[-1] if last_round else rng.choice(cands)
    step, ts = rng.choice(ws)
    return rnd, step, ts


def restarted_rounds(rec: Record) -> list[list[Inc]]:
    """Rounds after the first: the job restarted into them."""
    return rounds(rec)[1:]


def target_step(rec: Record) -> int | None:
    import yaml
    data = yaml.safe_load((rec.dir / "scenario.yaml").read_text())
    return (data.get("expect") or {}).get("reaches_step")
