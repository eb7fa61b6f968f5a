"""The lineage of training progress over the whole run, derived once from the History.

- incarnation: one worker process's life (node, local_rank, pid; rank, world size, restart count;
  first and last event; first and last step; why it ended, when the history says);
- round: one rendezvous generation, the processes that trained together. restart_count cannot say
  it (a replacement node's agent counts from 0 while its peers are at 1), so a process joins the
  current round when it started before any of the round's processes ended, and opens the next round
  otherwise (a rank hung since the last round does not hold it open: the round's first end counts);
- restore: the edge back taken at the start of an incarnation: the process's checkpoint_loaded /
  checkpoint_fresh_start before its first step (a job without events: inferred from the first step
  it printed), with the inventory entry of the fault before it that holds that checkpoint;
- tracks: every step each rank reported, in order; the world track: the steps every rank of a round
  that trained reported (a step the round's ranks did not all report is no world step).

Checks (invariants.py, recovery.py, observed.py, replicas.py) read this; `lineage(h)` builds it once
per History and caches it on the instance. `lineage_summary(h)` is its JSON form for result.json.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from chaosbench.checks.history import History, Incarnation

RESTORE_EVENTS = ("checkpoint_loaded", "checkpoint_fresh_start")


@dataclass
class Restore:
    ts: float
    kind: str                     # loaded | fresh | inferred
    step: int | None              # the step restored (0: a fresh start)
    tier: str | None = None       # 'none' for a fresh start
    source: str | None = None
    checksum_ok: Any = None       # as the job logged it; None: not said
    event: dict | None = None
    fault_id: str | None = None   # the last fault injected before it
    inventory: dict | None = None  # that fault's inventory entry holding this checkpoint, if one


@dataclass
class Inc:
    key: Incarnation
    events: list[dict]
    rank: int | None = None
    world_size: int | None = None
    restart_count: int = 0
    start: float = 0.0
    end: float = 0.0
    steps: list[dict] = field(default_factory=list)
    round: int = -1
    restore: Restore | None = None
    ended: str | None = None
    observed: bool = False

    @property
    def node(self) -> str:
        return self.key[0]

    @property
    def local_rank(self) -> int:
        return self.key[1]

    @property
    def pid(self) -> int:
        return self.key[2]

    @property
    def first_step(self) -> int | None:
        return int(self.steps[0]["step"]) if self.steps else None

    @property
    def last_step(self) -> int | None:
        return int(self.steps[-1]["step"]) if self.steps else None

    @property
    def label(self) -> str:
        return f"{self.node}/local{self.local_rank} (pid {self.pid}, rank {self.rank})"


@dataclass
class WorldStep:
    round: int
    step: int
    world_size: int | None
    ts: float          # when the last rank reported it (the step was done everywhere)
    ranks: tuple


@dataclass
class Round:
    index: int
    members: list[Inc]
    start: float
    end: float                     # the first member's end: the round broke up then
    world_size: int | None = None  # the size most of its steps claim
    sizes: set = field(default_factory=set)
    world: list[WorldStep] = field(default_factory=list)

    @property
    def trained(self) -> list[Inc]:
        return [m for m in self.members if m.steps]

    @property
    def first_step_at(self) -> float | None:
        return min((m.steps[0]["ts"] for m in self.trained), default=None)

    @property
    def first_step(self) -> int | None:
        return min((m.first_step for m in self.trained), default=None)


@dataclass
class Lineage:
    incarnations: list[Inc]
    rounds: list[Round]
    world: list[WorldStep]                      # every world step of the run, by time
    tracks: dict[int, list[tuple[int, float, Incarnation]]]   # rank -> (step, ts, incarnation)
    stride: int | None                          # the step stride the job reports at (1: every step)
    observed: bool                              # only the node watcher spoke: ranks and loss unseen
    by_key: dict[Incarnation, Inc] = field(default_factory=dict)

    @property
    def restores(self) -> list[tuple[Inc, Restore]]:
        return [(i, i.restore) for i in self.incarnations if i.restore is not None]

    def round_of(self, ev: dict, h: History) -> int:
        return self.by_key[h.incarnation(ev)].round

    def contiguous_top(self, any_rank: bool = False) -> tuple[int | None, float | None, str | None]:
        """The highest step the world track reaches without a gap (a step beyond the last one + the
        stride without a restore between), when it was reached, and the first gap, if one. any_rank:
        a step one rank of its round reported counts (the harness's own view of progress; the last
        lines of a run may be collected from one rank's file before another's)."""
        top, at, gap = None, None, None
        stride = self.stride or 1
        track = self.world if not any_rank else sorted(
            (WorldStep(r.index, s, r.world_size, ts, ()) for r in self.rounds for s, ts in
             first_reports(r).items()), key=lambda w: w.ts)
        for ws in track:
            if top is None or ws.step <= top + stride or self._restored_to(ws, top):
                if top is None or ws.step > top:
                    top, at = ws.step, ws.ts
                continue
            gap = gap or f"step {top} -> {ws.step} at {ws.ts:.3f} without a restore between"
        return top, at, gap

    def _restored_to(self, ws: WorldStep, top: int) -> bool:
        r = self.rounds[ws.round]
        return ws.step == r.first_step and any(m.restore is not None and m.restore.step is not None
                                               and m.restore.step <= top for m in r.trained)


def lineage(h: History) -> Lineage:
    """The run's lineage, built once per History (rebuilt when its events or faults were replaced)."""
    stamp = (id(h.events), len(h.events), id(h.faults), len(h.faults), len(h.inventories))
    got = h.__dict__.get("_lineage")
    if got is not None and got[0] == stamp:
        return got[1]
    built = _build(h)
    h.__dict__["_lineage"] = (stamp, built)
    return built


def _build(h: History) -> Lineage:
    keys = h._incarnation_keys()
    incs: dict[Incarnation, Inc] = {}
    for ev in sorted(h.events, key=lambda e: e.get("ts", 0.0)):
        k = keys[id(ev)]
        inc = incs.get(k)
        if inc is None:
            inc = incs[k] = Inc(k, [], start=ev["ts"], end=ev["ts"])
        inc.events.append(ev)
        inc.end = max(inc.end, ev["ts"])
    for inc in incs.values():
        _describe(inc)
    ordered = sorted(incs.values(), key=lambda i: (i.start, i.key))
    rounds = _rounds(ordered)
    for inc in ordered:
        _restore(h, inc)
    observed = bool(h.events) and all(e.get("observed") for e in h.events)
    world = []
    for r in rounds:
        r.world = _world_steps(r, observed)
        world += r.world
    world.sort(key=lambda w: w.ts)
    tracks: dict[int, list] = {}
    for inc in ordered:
        if inc.rank is not None:
            tracks.setdefault(inc.rank, []).extend((int(e["step"]), e["ts"], inc.key) for e in inc.steps)
    for t in tracks.values():
        t.sort(key=lambda x: x[1])
    lin = Lineage(ordered, rounds, world, tracks, _stride(ordered), observed, {i.key: i for i in ordered})
    _endings(h, lin)
    return lin


def _describe(inc: Inc) -> None:
    evs = inc.events
    ranked = [e for e in evs if e.get("rank") is not None]
    inc.rank = int(ranked[0]["rank"]) if ranked else None
    sized = [e for e in evs if e.get("world_size") is not None]
    inc.world_size = int(sized[-1]["world_size"]) if sized else None
    inc.restart_count = int(evs[0].get("restart_count", 0) or 0)
    inc.steps = [e for e in evs if e.get("event") == "step" and e.get("step") is not None]
    inc.observed = all(e.get("observed") for e in evs)


def _rounds(ordered: list[Inc]) -> list[Round]:
    rounds: list[Round] = []
    for inc in ordered:
        cur = rounds[-1] if rounds else None
        # a watched process that printed nothing and whose exit was not seen (a killed node's rank
        # of a job printing from rank 0) ended at some unknown time: it does not close the round
        end = inc.end if not inc.observed or any(e.get("event") == "worker_exit" for e in inc.events) \
            or inc.steps else float("inf")
        if cur is None or inc.start > cur.end:
            cur = Round(len(rounds), [], inc.start, end)
            rounds.append(cur)
        else:
            cur.end = min(cur.end, end)
        cur.members.append(inc)
        inc.round = cur.index
    for r in rounds:
        sizes = Counter(int(e["world_size"]) for m in r.members for e in m.steps if e.get("world_size") is not None)
        r.sizes = set(sizes)
        r.world_size = sizes.most_common(1)[0][0] if sizes else None
    return rounds


def _world_steps(r: Round, observed: bool) -> list[WorldStep]:
    """Steps every rank of the round that trained reported (a job without events: any printed step,
    since a job often prints from rank 0 only)."""
    reports: dict[int, dict] = {}
    for m in r.trained:
        for e in m.steps:
            got = reports.setdefault(int(e["step"]), {})
            got.setdefault(m.key, e["ts"])
    need = {m.key for m in r.trained}
    out = []
    for step, got in reports.items():
        if observed or set(got) == need:
            ranks = tuple(sorted(r_.rank for r_ in r.trained if r_.key in got and r_.rank is not None))
            out.append(WorldStep(r.index, step, r.world_size, max(got.values()), ranks))
    return sorted(out, key=lambda w: w.ts)


def first_reports(r: Round) -> dict[int, float]:
    """step -> when a rank of the round first reported it."""
    out: dict[int, float] = {}
    for m in r.trained:
        for e in m.steps:
            out[int(e["step"])] = min(out.get(int(e["step"]), e["ts"]), e["ts"])
    return out


def _stride(ordered: list[Inc]) -> int | None:
    """The most common positive difference between consecutive reported steps of one process."""
    diffs = Counter(b - a for i in ordered for a, b in zip([s for s in _seq(i)], _seq(i)[1:]) if b > a)
    return diffs.most_common(1)[0][0] if diffs else None


def _seq(inc: Inc) -> list[int]:
    return [int(e["step"]) for e in inc.steps]


def _restore(h: History, inc: Inc) -> None:
    got = [e for e in inc.events if e.get("event") in RESTORE_EVENTS]
    first = inc.steps[0]["ts"] if inc.steps else None
    before = [e for e in got if first is None or e["ts"] <= first]
    ev = before[-1] if before else (got[-1] if got else None)
    if ev is not None:
        fresh = ev["event"] == "checkpoint_fresh_start"
        step = 0 if fresh else (int(ev["step"]) if ev.get("step") is not None else None)
        inc.restore = Restore(ev["ts"], "fresh" if fresh else "loaded", step, "none" if fresh else ev.get("tier"),
                              ev.get("source"), ev.get("checksum_ok"), ev)
    elif inc.observed and inc.round > 0 and inc.steps:
        inc.restore = Restore(inc.steps[0]["ts"], "inferred", None)
    if inc.restore is None:
        return
    before_it = [f for f in h.faults if f.injected_at <= inc.restore.ts]
    if before_it:
        inc.restore.fault_id = before_it[-1].id
        inc.restore.inventory = _inventory_entry(h.inventories.get(before_it[-1].id), inc)


def _inventory_entry(inv: dict | None, inc: Inc) -> dict | None:
    r = inc.restore
    if inv is None or r is None or r.kind != "loaded" or r.step is None:
        return None
    anywhere = r.tier == "s3" or r.source == "peer"
    for c in inv.get("checkpoints", []):
        if (r.tier is None or c.get("tier") == r.tier) and c.get("step") == r.step and c.get("published", True) \
                and (anywhere or c.get("tier") == "s3" or str(c.get("node", "")).split("/")[0] == inc.node):
            return c
    return None


def _endings(h: History, lin: Lineage) -> None:
    """Why each process ended, as far as the history says."""
    stopped = h.harness.get("stopped_at")
    for inc in lin.incarnations:
        last = inc.events[-1]
        name = last.get("event")
        if name == "fatal":
            inc.ended = f"fatal: {last.get('error_type', '')} {last.get('error', '')}".strip()
        elif name == "phase" and last.get("phase") == "shutdown":
            inc.ended = f"shutdown ({last.get('reason', 'no reason given')})"
        elif name == "run_complete":
            inc.ended = "run complete"
        elif name == "worker_exit":
            inc.ended = f"exited (code {last.get('exit_code', '?')})"
        else:
            hit = [f for f in h.faults if inc.node in str(f.target).split(",") and f.injected_at >= inc.end - 2.0]
            if hit:
                inc.ended = f"{hit[0].id} ({hit[0].fault}) acted on its node"
            elif isinstance(stopped, (int, float)) and inc.end <= stopped and inc.round == len(lin.rounds) - 1:
                inc.ended = "the run stopped"


def lineage_summary(h: History) -> dict:
    """result.json `lineage` (docs/result.md "Run-level invariants"): per rank its incarnations, per
    round its members, and the world track as stretches of consecutive world steps."""
    lin = lineage(h)

    def r3(x):
        return None if x is None else round(float(x), 3)

    ranks: dict[str, list] = {}
    for inc in lin.incarnations:
        rs = inc.restore
        ranks.setdefault(str(inc.rank) if inc.rank is not None else "?", []).append({
            "node": inc.node, "local_rank": inc.local_rank, "pid": inc.pid, "restart_count": inc.restart_count,
            "round": inc.round, "start": r3(inc.start), "end": r3(inc.end),
            "first_step": inc.first_step, "last_step": inc.last_step, "steps": len(inc.steps),
            "restore": None if rs is None else {"kind": rs.kind, "tier": rs.tier, "step": rs.step,
                                                "source": rs.source, "checksum_ok": rs.checksum_ok,
                                                "fault_id": rs.fault_id,
                                                "inventory": (rs.inventory or {}).get("dir")},
            "ended": inc.ended})
    stretches: list[dict] = []
    for ws in lin.world:
        cur = stretches[-1] if stretches else None
        if cur and cur["round"] == ws.round and ws.step == cur["last_step"] + (lin.stride or 1):
            cur["last_step"], cur["end"] = ws.step, r3(ws.ts)
        else:
            stretches.append({"round": ws.round, "world_size": ws.world_size, "first_step": ws.step,
                              "last_step": ws.step, "start": r3(ws.ts), "end": r3(ws.ts)})
    return {
        "observed_only": lin.observed, "stride": lin.stride,
        "ranks": ranks,
        "rounds": [{"index": r.index, "start": r3(r.start), "world_size": r.world_size,
                    "members": [f"{m.node}/local{m.local_rank}" for m in r.members],
                    "first_step": r.first_step, "first_step_at": r3(r.first_step_at)} for r in lin.rounds],
        "world": stretches,
    }


def recovery_round(h: History, t0: float, end: float) -> tuple[list[Inc], list[Inc], list[Inc]]:
    """After a fault at t0 (before the next one at `end`): (every process started in between, the
    processes of the first round that trained again, the ones that started and died before it did).
    The recovery is that round only: a healed node rejoining later is the next round."""
    lin = lineage(h)
    new = [i for i in lin.incarnations if t0 <= i.start < end]
    trained = [i for i in new if i.steps]
    if not trained:
        return new, [], [i for i in new if not i.steps]
    first = min(trained, key=lambda i: i.steps[0]["ts"])
    at = first.steps[0]["ts"]
    members = [i for i in trained if i.round == first.round and i.start <= at]
    return new, members, [i for i in new if not i.steps and i.start <= at]


def resume_point(h: History, members: list[Inc], tol_s: float = 2.0) -> float | None:
    """When a recovering round took up the world's state: the first restore its processes logged, or (torchft) the
    first heal_start on their nodes since they started (a heal is begun by the quorum that admits the group, before
    the step that the group and the survivors then train together); else the round's first step."""
    if not members:
        return None
    nodes, start = {m.node for m in members}, min(m.start for m in members)
    heals = [float(a["ts"]) for a in h.agent_events
             if a.get("event") == "heal_start" and a.get("node") in nodes and a["ts"] >= start - tol_s]
    restores = [m.restore.ts for m in members if m.restore is not None]
    firsts = [m.steps[0]["ts"] for m in members if m.steps]
    return min(heals + restores, default=min(firsts, default=None))


def world_step_at(h: History, t: float, quorum: bool) -> int | None:
    """The world's last completed step before t: the last step of the world track (a step every rank of its round
    reported; lineage().world) completed before t. A quorum run (torchft) keeps no world-wide round: the replica
    groups are the world side by side and train on while one is lost, so its world's step is the last step any
    group reported before t. The last, not the highest: after a restore rolled the world back, the steps since
    are the world's, not the ones it rolled back from."""
    if quorum:
        steps = [e for e in h.events if e.get("event") == "step" and e.get("step") is not None and e["ts"] < t]
        last = max(steps, key=lambda e: e["ts"], default=None)
        return None if last is None else int(last["step"])
    before = [w for w in lineage(h).world if w.ts < t]
    return before[-1].step if before else None
