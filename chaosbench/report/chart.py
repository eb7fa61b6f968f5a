"""Timeline chart geometry: training step vs time per node/rank, faults, restarts, saves.

This module computes coordinates only; the template draws them as inline SVG, so every label
goes through Jinja's autoescaping and the page needs no JavaScript charting library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from chaosbench.instrument.tiers import TIERS

WIDTH = 1100
LEFT, RIGHT = 92, 24
TOP = 46  # room for two rows of fault labels above the plot
MAIN_H = 250
WS_H = 56
LANE_H = 20
GAP = 14
MAX_POINTS = 1500  # per series; a long run is thinned, its last point always kept

PALETTE = ("#2563eb", "#059669", "#d97706", "#7c3aed", "#db2777", "#0891b2", "#65a30d", "#b45309")
FAULT_COLOURS = ("#dc2626", "#ea580c", "#be123c", "#9333ea")


@dataclass
class Series:
    label: str
    colour: str
    segments: list[str]  # SVG "points" strings, one per incarnation (restart_count)
    last_step: int
    width: float  # ranks in lockstep draw on top of each other: earlier series are drawn wider


@dataclass
class Mark:
    x: float
    y: float
    title: str
    ok: bool = True


@dataclass
class FaultBand:
    x: float
    w: float
    label: str
    title: str
    colour: str
    open_end: bool  # shaded to the first step after it, not to a heal
    end_x: float = 0.0
    anchor_end: bool = False  # label near the right edge: drawn to the left of the line
    recovery_label: str = ""  # e.g. "↺ memory @ step 40 · 3.6 s", at the end of the window
    failed: bool = False  # never recovered: label in red, drawn inside the window


@dataclass
class PhaseSpan:
    x: float
    w: float
    phase: str  # detection | rendezvous | restore | first (CSS class suffix)
    title: str


@dataclass
class Tick:
    pos: float
    label: str


@dataclass
class Chart:
    t0: float  # time zero of the x axis: the run's start, else its first recorded event
    width: int
    height: int
    left: int
    right_x: float
    main_top: float
    main_bottom: float
    ws_top: float
    ws_bottom: float
    lanes: list[tuple[str, float]]  # (label, centre y)
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    ws_ticks: list[Tick]
    series: list[Series] = field(default_factory=list)
    faults: list[FaultBand] = field(default_factory=list)
    ws_path: str = ""
    ws_labels: list[Mark] = field(default_factory=list)
    saves: dict[str, list[Mark]] = field(default_factory=dict)
    restarts: list[Mark] = field(default_factory=list)
    rendezvous: list[Mark] = field(default_factory=list)
    restart_lines: list[float] = field(default_factory=list)
    phases: list[PhaseSpan] = field(default_factory=list)  # recovery phases, a strip under the steps
    empty: bool = False


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out


def _fmt_tick(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e5 else f"{v:.3g}"


def _time_range(result: dict[str, Any], timeline: dict[str, Any], faults: list[dict]) -> tuple[float, float]:
    """The run's start and end, widened to every recorded event (clocks and records can disagree)."""
    all_ts = [r["ts"] for key in ("steps", "restarts", "rendezvous", "checkpoints") for r in timeline[key]]
    all_ts += [p[0] for p in timeline["world_size"]] + [f["injected_at"] for f in faults]
    t0 = result.get("started_at") if isinstance(result.get("started_at"), (int, float)) else None
    t1 = result.get("finished_at") if isinstance(result.get("finished_at"), (int, float)) else None
    if t0 is None or (all_ts and t0 > min(all_ts)):
        t0 = min(all_ts) if all_ts else 0.0
    if t1 is None or (all_ts and t1 < max(all_ts)):
        t1 = max(all_ts) if all_ts else t0 + 1.0
    return t0, (t1 if t1 - t0 >= 1e-6 else t0 + 1.0)


def build_chart(result: dict[str, Any], timeline: dict[str, Any]) -> Chart:
    steps = timeline["steps"]
    faults = [f for f in result.get("faults") or [] if isinstance(f.get("injected_at"), (int, float))]
    t0, t1 = _time_range(result, timeline, faults)
    right_x = WIDTH - RIGHT
    main_top, main_bottom = TOP, TOP + MAIN_H
    ws_top = main_bottom + GAP + 8
    ws_bottom = ws_top + WS_H
    lane_names = [f"{t} save" for t in TIERS] + ["restart", "rendezvous"]
    lane_y0 = ws_bottom + GAP + 4
    lanes = [(name, lane_y0 + i * LANE_H + LANE_H / 2) for i, name in enumerate(lane_names)]
    height = int(lane_y0 + len(lane_names) * LANE_H + 30)

    def x(ts: float) -> float:
        return round(LEFT + (ts - t0) / (t1 - t0) * (right_x - LEFT), 2)

    max_step = max((r["step"] for r in steps), default=0)
    y_max = max(nice_ticks(0, max_step or 1)[-1], max_step or 1)

    def y(step: float) -> float:
        return round(main_bottom - step / y_max * (main_bottom - main_top), 2)

    chart = Chart(
        t0=t0, width=WIDTH, height=height, left=LEFT, right_x=right_x, main_top=main_top,
        main_bottom=main_bottom, ws_top=ws_top, ws_bottom=ws_bottom, lanes=lanes,
        x_ticks=[Tick(x(t0 + v), _fmt_tick(v)) for v in nice_ticks(0, t1 - t0, 10)],
        y_ticks=[Tick(y(v), _fmt_tick(v)) for v in nice_ticks(0, y_max, 5)],
        ws_ticks=[], empty=not steps,
    )
    recoveries = {r.get("fault_id"): r for r in result.get("recoveries") or []}
    _add_series(chart, steps, x, y)
    _add_faults(chart, faults, recoveries, x, t0, t1)
    _add_phases(chart, recoveries, x)
    _add_world_size(chart, timeline["world_size"], result.get("cluster") or {}, x)
    _add_lanes(chart, timeline, x, t0)
    return chart


def _add_series(chart: Chart, steps: list[dict], x, y) -> None:
    """One series per (node, rank); a new polyline per incarnation so a restart shows as a gap."""
    by_series: dict[tuple, list[dict]] = {}
    for r in steps:
        by_series.setdefault((str(r.get("node")), r.get("rank")), []).append(r)
    ordered = sorted(by_series.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
    for i, ((node, rank), rows) in enumerate(ordered):
        rows.sort(key=lambda r: r["ts"])
        stride = max(1, math.ceil(len(rows) / MAX_POINTS))
        kept = rows[::stride] + ([rows[-1]] if (len(rows) - 1) % stride else [])
        segments: list[list[str]] = []
        last_rc = object()
        for r in kept:
            if r.get("restart_count") != last_rc:
                segments.append([])
                last_rc = r.get("restart_count")
            segments[-1].append(f"{x(r['ts'])},{y(r['step'])}")
        label = node if rank is None else f"{node} / rank {rank}"
        width = 2.0 + 3.5 * max(0, min(len(ordered), 4) - 1 - i)
        chart.series.append(Series(label, PALETTE[i % len(PALETTE)], [" ".join(s) for s in segments],
                                   int(rows[-1]["step"]), width))


def _add_faults(chart: Chart, faults: list[dict], recoveries: dict, x, t0: float, t1: float) -> None:
    """A shaded window per fault: injected → healed, else → first step after, else → end (never recovered)."""
    compact = len(faults) > 4  # many faults (flapping node): short labels, the details are in tooltips
    for i, f in enumerate(faults):
        start, healed = f["injected_at"], f.get("healed_at")
        rec = recoveries.get(f.get("id")) or {}
        first_step = rec.get("first_step_at")
        open_end = not isinstance(healed, (int, float))
        never = bool(rec) and open_end and first_step is None and rec.get("total_s") is None
        end = t1 if never else healed if not open_end else first_step
        if not isinstance(end, (int, float)) or end < start:
            end = start
        full = " ".join(str(v) for v in (f.get("id"), f.get("type"), f.get("target")) if v)
        label = full if not compact else str(f.get("id") or f.get("type") or "fault")
        until = ("healed" if not open_end else "not recovered by the end" if never
                 else "first step after" if end > start else "no heal, no recovery")
        title = f"{full}: injected t+{start - t0:.1f}s, {until} t+{end - t0:.1f}s ({f.get('trigger') or ''})"
        recovered = ""
        if never:
            recovered = "✗ not recovered"
        elif (rec.get("tier") or rec.get("restored_step") is not None) and not compact:
            recovered = f"↺ {rec.get('tier') or 'tier not measured'}"
            if rec.get("restored_step") is not None:
                recovered += f" @ step {rec['restored_step']}"
            if isinstance(rec.get("total_s"), (int, float)):
                recovered += f" · {rec['total_s']:.1f} s"
        chart.faults.append(FaultBand(x(start), max(2.0, x(end) - x(start)), label, title,
                                      FAULT_COLOURS[i % len(FAULT_COLOURS)], open_end,
                                      end_x=x(end), recovery_label=recovered, failed=never,
                                      anchor_end=x(start) > chart.right_x - 8 * len(label) - 20))


def _add_phases(chart: Chart, recoveries: dict, x) -> None:
    """Recovery phases as a strip along the bottom of the step plot, coloured like the breakdown bars."""
    for rec in recoveries.values():
        marks = [rec.get(k) for k in ("injected_at", "detected_at", "rendezvous_done_at", "restored_at",
                                       "first_step_at")]
        inj, det = marks[0], marks[1]
        if isinstance(inj, (int, float)) and isinstance(det, (int, float)) and det < inj:
            marks[1] = inj   # seen before the fault log's record: rendezvous counts from the injection, as in the table
        for name, a, b in zip(("detection", "rendezvous", "restore", "first"), marks, marks[1:]):
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b >= a:
                label = "first step" if name == "first" else name
                chart.phases.append(PhaseSpan(x(a), max(1.0, x(b) - x(a)), name,
                                              f"{rec.get('fault_id')} {label}: {b - a:.2f} s"))


def _add_world_size(chart: Chart, points: list[tuple], cluster: dict, x) -> None:
    if not points:
        return
    ws_max = max(p[1] for p in points) or 1
    if isinstance(cluster.get("max_nodes"), int) and isinstance(cluster.get("procs_per_node"), int):
        ws_max = max(ws_max, cluster["max_nodes"] * cluster["procs_per_node"])

    def wy(ws: float) -> float:
        return round(chart.ws_bottom - ws / ws_max * (chart.ws_bottom - chart.ws_top - 6), 2)

    path, prev = [], None
    for ts, ws in sorted(points):
        path.append(f"M{x(ts)},{wy(ws)}" if prev is None else f"H{x(ts)} V{wy(ws)}")
        if ws != prev:
            chart.ws_labels.append(Mark(x(ts), wy(ws), str(ws)))
        prev = ws
    path.append(f"H{chart.right_x}")
    chart.ws_path = " ".join(path)
    chart.ws_ticks = [Tick(wy(0), "0"), Tick(wy(ws_max), str(ws_max))]


def _add_lanes(chart: Chart, timeline: dict[str, Any], x, t0: float) -> None:
    """Marks for checkpoint saves per tier, restarts and rendezvous rounds."""
    lane_y = dict(chart.lanes)
    # A save is the same checkpoint on every rank: one mark per (tier, step, outcome).
    saves: dict[tuple, dict] = {}
    for c in sorted(timeline["checkpoints"], key=lambda c: c["ts"]):
        key = (c.get("tier"), c.get("step"), bool(c.get("ok", True)))
        saves.setdefault(key, {"ts": c["ts"], "nodes": set()})["nodes"].add(str(c.get("node")))
    for (tier, step, ok), entry in saves.items():
        if tier in TIERS:
            title = (f"{tier} step {step} {'saved' if ok else 'FAILED'} t+{entry['ts'] - t0:.1f}s "
                     f"on {', '.join(sorted(entry['nodes']))}")
            chart.saves.setdefault(tier, []).append(Mark(x(entry["ts"]), lane_y[f"{tier} save"], title, ok))
    for r in timeline["restarts"]:
        chart.restarts.append(Mark(x(r["ts"]), lane_y["restart"],
                                   f"{r.get('node')} restart {r.get('restart_count')} t+{r['ts'] - t0:.1f}s"))
    chart.restart_lines = sorted({round(m.x) for m in chart.restarts})  # one line per round, not per node
    for r in timeline["rendezvous"]:
        chart.rendezvous.append(Mark(x(r["ts"]), lane_y["rendezvous"],
                                     f"{r.get('node')} rendezvous t+{r['ts'] - t0:.1f}s"))
