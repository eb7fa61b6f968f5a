"""Parsing and statistics for bench/recovery.py: one rep's run directory -> one measurement,
many measurements -> medians, ratios and the printed table.

The breakdown is chaosbench.checks.recovery's (the same one the HTML report shows), read from the
run's events/ and faults.jsonl, so the stock baseline and the reference trainer are measured by
the same code: both write docs/events.md lines.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from chaosbench.checks.history import History
from chaosbench.checks.recovery import recoveries
from recovery_split import SPLIT, split

PHASES = ("detection_s", "rendezvous_s", "restore_s", "first_step_s", "total_s")


@dataclass
class Rep:
    """One repetition of one case. total_s None = training did not resume within the bound."""
    case: str                          # label, e.g. "tuned trainer, kill"
    rdzv: str = ""                     # rendezvous backend: the baseline a case is compared with
    stock: bool = False                # True for the stock-torchrun baseline itself
    detection_s: float | None = None
    rendezvous_s: float | None = None
    restore_s: float | None = None
    first_step_s: float | None = None
    total_s: float | None = None
    lost_steps: int | None = None
    lost_s: float | None = None
    tier: str | None = None
    notice_s: float | None = None      # the rendezvous phase split by the survivor agent's log (recovery_split.py)
    stop_s: float | None = None
    round_s: float | None = None
    start_s: float | None = None
    load: float | None = None          # 1-minute load average when the fault was injected
    note: str = ""
    injected: bool = True              # False: the rep broke before its fault (start-up), not a recovery


def measure(run_dir: Path, case: str, rdzv: str = "", stock: bool = False, load: float | None = None,
            note: str = "", agent_log: Path | None = None) -> Rep:
    """The first fault's recovery in run_dir (events/ + faults.jsonl); `agent_log`: a survivor's node
    log, to split the rendezvous phase (recovery_split.py)."""
    h = History.load(run_dir)
    rep = Rep(case=case, rdzv=rdzv, stock=stock, load=load, note=note)
    recs = recoveries(h)
    if not h.faults:
        rep.note, rep.injected = rep.note or "no fault recorded", False
        return rep
    if not recs:
        # No new worker started after the fault; detection may still be known (silent case).
        t0 = h.faults[0].injected_at
        det = [e["ts"] for e in h.of("health_check_failed", "fatal") if e["ts"] >= t0]
        rep.detection_s = round(min(det) - t0, 3) if det else None
        return rep
    r = recs[0]
    for k in PHASES:
        setattr(rep, k, getattr(r, k))
    rep.lost_steps, rep.tier = r.lost_steps, r.tier
    if agent_log is not None and r.detection_s is not None and r.rendezvous_s is not None:
        t0 = h.faults[0].injected_at
        sign = t0 + r.detection_s
        for k, v in split(agent_log, t0, sign, sign + r.rendezvous_s).items():
            setattr(rep, k, v)
    rep.lost_s = _lost_seconds(h, r.step_before_fault, r.restored_step)
    return rep


def _lost_seconds(h: History, step_before: int | None, restored: int | None) -> float | None:
    """Training time redone: from the first completion of the restored step to the last step before the fault."""
    if step_before is None or restored is None:
        return None
    if restored >= step_before:
        return 0.0
    done: dict[int, float] = {}   # step -> its first completion (a redone step completes again later)
    for e in h.of("step"):
        if "step" in e:
            done[int(e["step"])] = min(e["ts"], done.get(int(e["step"]), e["ts"]))
    if restored not in done or step_before not in done:
        return None
    return round(done[step_before] - done[restored], 3)


def median(values) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), 3) if vals else None


@dataclass
class Summary:
    case: str
    rdzv: str
    stock: bool
    reps: int                          # reps whose fault was injected
    recovered: int
    start_failures: int = 0            # reps that broke before the fault (not counted in reps)
    med: dict[str, float | None] = field(default_factory=dict)
    lost_steps: float | None = None
    lost_s: float | None = None
    tiers: str = ""
    loads: list[float] = field(default_factory=list)


def summarize(reps: list[Rep]) -> Summary:
    if not reps:
        raise ValueError("summarize: no repetitions")
    injected = [r for r in reps if r.injected]
    s = Summary(case=reps[0].case, rdzv=reps[0].rdzv, stock=reps[0].stock, reps=len(injected),
                recovered=sum(r.total_s is not None for r in injected), start_failures=len(reps) - len(injected))
    reps = injected
    s.med = {k: median(getattr(r, k) for r in reps) for k in PHASES + SPLIT}
    s.lost_steps = median(r.lost_steps for r in reps)
    s.lost_s = median(r.lost_s for r in reps)
    s.tiers = ",".join(sorted({r.tier for r in reps if r.tier}))
    s.loads = [r.load for r in reps if r.load is not None]
    return s


def ratio(baseline: float | None, value: float | None) -> float | None:
    """How many times faster `value` is than `baseline` (None when either is unknown)."""
    if baseline is None or value is None or value <= 0:
        return None
    return round(baseline / value, 2)


def _f(x, unit: str = "") -> str:
    return "-" if x is None else f"{x:.2f}{unit}" if isinstance(x, float) else f"{x}{unit}"


def table(summaries: list[Summary], baselines: dict[str, float | None]) -> str:
    """Fixed-width table; `baselines` maps a rendezvous backend to the stock median total."""
    head = (f"{'case':<30} {'backend':<8} {'ok':>5} {'detect':>7} {'rdzv':>7} {'restore':>7} {'1st step':>8} "
            f"{'TOTAL':>7} {'lost':>9} {'tier':>7} {'x stock':>7}  load@fault")
    lines = [head, "-" * len(head)]
    for s in summaries:
        x = None if s.stock else ratio(baselines.get({"c10d-links": "c10d"}.get(s.rdzv, s.rdzv)), s.med["total_s"])
        lost = "-" if s.lost_steps is None else f"{s.lost_steps:g}st/{_f(s.lost_s, 's')}"
        loads = " ".join(f"{v:.1f}" for v in s.loads) or "-"
        if s.start_failures:
            loads += f"  ({s.start_failures} rep(s) broke before the fault)"
        lines.append(f"{s.case:<30} {s.rdzv:<8} {s.recovered:>2}/{s.reps:<2} {_f(s.med['detection_s']):>7} "
                     f"{_f(s.med['rendezvous_s']):>7} {_f(s.med['restore_s']):>7} {_f(s.med['first_step_s']):>8} "
                     f"{_f(s.med['total_s']):>7} {lost:>9} {s.tiers or '-':>7} {_f(x, 'x'):>7}  {loads}")
    return "\n".join(lines)
