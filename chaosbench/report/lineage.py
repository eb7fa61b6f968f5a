"""The lineage track: per rank, which steps each incarnation trained, drawn against the step axis,
with each restore as an edge back from where the previous incarnation stopped to the step it
resumed from, and each fault marked at the world step it hit. Read from result.json's `lineage`
(chaosbench/checks/lineage.py `lineage_summary`, docs/result.md); shown only where a restart happened.

Coordinates only, like chart.py; the template draws them (every label autoescaped).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .chart import FAULT_COLOURS, LEFT, PALETTE, RIGHT, WIDTH, Tick, nice_ticks

TOP = 34          # room for the fault labels
BAR_H = 10
ROW_H = 16        # one incarnation per row, so a replayed step range shows as an overlap
RANK_GAP = 10


@dataclass
class Bar:
    x: float
    w: float
    y: float
    colour: str
    title: str
    empty: bool = False   # a process that trained no step: a hollow marker


@dataclass
class Edge:
    d: str                # SVG path from the previous bar's end back to the restored step
    title: str
    label: str
    lx: float             # the label ends left of the bar it leads to
    ly: float
    bad: bool             # no restore seen, or a fresh start after progress


@dataclass
class FaultMark:
    x: float
    label: str
    title: str
    colour: str


@dataclass
class Track:
    width: int
    height: int
    left: int
    right_x: float
    top: float
    bottom: float
    lanes: list[tuple[str, float, float]] = field(default_factory=list)   # label, top, bottom
    bars: list[Bar] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    faults: list[FaultMark] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _incarnations(lineage: Any) -> dict[str, list[dict]]:
    ranks = lineage.get("ranks") if isinstance(lineage, dict) else None
    if not isinstance(ranks, dict):
        return {}
    out = {}
    for rank, incs in ranks.items():
        if isinstance(incs, list):
            rows = [i for i in incs if isinstance(i, dict)]
            out[str(rank)] = sorted(rows, key=lambda i: i.get("start") if _num(i.get("start")) else 0.0)
    return out


def _rank_key(rank: str) -> tuple:
    return (0, int(rank), "") if rank.isdigit() else (1, 0, rank)


def _step_at(world: list[dict], ts: float) -> float | None:
    """The world step training had reached at ts (interpolated inside a stretch of steps)."""
    at = None
    for s in world:
        a, b, s0, s1 = s.get("start"), s.get("end"), s.get("first_step"), s.get("last_step")
        if not all(_num(v) for v in (a, b, s0, s1)) or a > ts:
            continue
        at = s1 if ts >= b or b <= a else s0 + (s1 - s0) * (ts - a) / (b - a)
    return at


def build_lineage(lineage: Any, result: dict[str, Any], t0: float) -> Track | None:
    """The track, or None where no rank restarted (one incarnation each: nothing to show)."""
    ranks = _incarnations(lineage)
    if not ranks or all(len(incs) < 2 for incs in ranks.values()):
        return None
    steps = [v for incs in ranks.values() for i in incs
             for v in (i.get("last_step"), (i.get("restore") or {}).get("step")) if _num(v)]
    max_step = max(steps, default=1) or 1
    right_x = WIDTH - RIGHT

    def x(step: float) -> float:
        return round(LEFT + step / max_step * (right_x - LEFT), 2)

    rows = sum(len(incs) for incs in ranks.values())
    bottom = TOP + rows * ROW_H + (len(ranks) - 1) * RANK_GAP + 6
    track = Track(width=WIDTH, height=int(bottom + 30), left=LEFT, right_x=right_x, top=TOP, bottom=bottom,
                  x_ticks=[Tick(x(v), f"{v:g}") for v in nice_ticks(0, max_step, 10)])
    y = TOP + 4
    for n, rank in enumerate(sorted(ranks, key=_rank_key)):
        colour, lane_top, prev = PALETTE[n % len(PALETTE)], y - 4, None
        for inc in ranks[rank]:
            _add_incarnation(track, inc, prev, x, y, colour, t0)
            prev = (inc, y)
            y += ROW_H
        track.lanes.append((f"rank {rank}", lane_top, y - 4))
        y += RANK_GAP
    world = [s for s in (lineage.get("world") or []) if isinstance(s, dict)]
    faults = [f for f in result.get("faults") or [] if isinstance(f, dict) and _num(f.get("injected_at"))]
    for i, f in enumerate(faults):
        step = _step_at(world, f["injected_at"])
        if step is not None:
            fid = str(f.get("id") or f.get("type") or "fault")
            track.faults.append(FaultMark(x(step), fid, f"{fid} ({f.get('type') or ''} {f.get('target') or ''}) "
                                          f"injected at t+{f['injected_at'] - t0:.1f} s, world step {step:.0f}",
                                          FAULT_COLOURS[i % len(FAULT_COLOURS)]))
    return track


def _add_incarnation(track: Track, inc: dict, prev: tuple[dict, float] | None, x, y: float, colour: str,
                     t0: float) -> None:
    first, last, rs = inc.get("first_step"), inc.get("last_step"), inc.get("restore")
    rs = rs if isinstance(rs, dict) else None
    begin = rs.get("step") if rs and _num(rs.get("step")) else (first - 1 if _num(first) else None)
    when = f"t+{inc['start'] - t0:.1f} s" if _num(inc.get("start")) else "start not recorded"
    who = f"{inc.get('node')}/local{inc.get('local_rank')} pid {inc.get('pid')}, round {inc.get('round')}"
    restored = (f"restored {rs.get('tier') or 'tier not said'} step {rs.get('step')}"
                + (f" after {rs['fault_id']}" if rs.get("fault_id") else "")) if rs else "no restore seen"
    trained = f"steps {first}–{last}" if _num(first) and _num(last) else "no step trained"
    title = f"{who} from {when}: {trained}; {restored}; ended: {str(inc.get('ended') or 'not said')[:200]}"
    if _num(begin) and _num(last):
        track.bars.append(Bar(x(begin), max(2.0, x(last) - x(begin)), y, colour, title))
    else:
        track.bars.append(Bar(x(begin if _num(begin) else 0), 6.0, y, colour, title, empty=True))
    if prev is None:
        return
    before, py = prev
    p_last = before.get("last_step")
    if not _num(p_last):
        return
    to = begin if _num(begin) else 0
    x0, x1, y0, y1 = x(p_last), x(to), py + BAR_H / 2, y + BAR_H / 2
    fresh = bool(rs) and (rs.get("kind") == "fresh" or rs.get("step") == 0) and p_last > 0
    bad = rs is None or fresh
    label = ("↺ no restore" if rs is None else "↺ fresh start" if fresh else
             f"↺ {rs.get('tier') or '?'} @ {rs.get('step')}")
    lost = f", {p_last - to:g} steps back" if _num(to) and p_last > to else ""
    bend = max(12.0, abs(x0 - x1) / 3)
    track.edges.append(Edge(f"M{x0},{y0} C{x0 + bend},{y0} {x1 - bend},{y1} {x1},{y1}",
                            f"{restored}{lost}", label, x1 - 4, y1 + 4, bad))
