"""The checkpoint interval per tier that maximises simulated goodput, and Young/Daly's beside it.

Young (1974) / Daly (2006), first order: T = sqrt(2 * delta * M), delta the checkpoint cost (here
the measured stall of one save), M the mean time between the failures that restore from that tier.
It needs one checkpoint cost and one failure rate; the simulator handles several tiers, sampled
recovery costs and durable-save lag, so the two agree only on the simple case (bench/forecast_check.py).

The search: per tier, a log-spaced sweep around Young/Daly, evaluated on the same failure draws
(common random numbers), then a parabola through the best points in log(T) (the curve is flat at
its top, so its vertex is steadier than the noisy argmax); tiers in turn, two passes.
"""
from __future__ import annotations

import math

import numpy as np

from chaosbench.instrument.tiers import TIERS
from .plan import Plan
from .sim import simulate

GRID = 33
SPAN = 10.0   # the sweep covers Young/Daly / SPAN .. x SPAN


def young_daly(plan: Plan) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for t in TIERS:
        rate = sum(plan.class_rate_per_s(k) for k, rt in plan.spec.restore_tier.items() if rt == t)
        stall = plan.spec.stall_s.get(t, 0.0)
        out[t] = math.sqrt(2 * stall / rate) if rate > 0 and stall > 0 else None
    return out


def _grid(plan: Plan, tier: str, yd: float | None) -> np.ndarray:
    centre = yd or plan.intervals[tier]
    lo = max(centre / SPAN, 1e-3)
    hi = min(centre * SPAN, plan.spec.duration_s)
    return np.geomspace(lo, max(hi, lo * 1.01), GRID)


def sweep(plan: Plan, tier: str, intervals: dict[str, float], grid: np.ndarray) -> np.ndarray:
    """Mean goodput at each interval of `grid` for `tier`, others held at `intervals`."""
    cand = {t: np.full(len(grid), intervals[t], float) for t in TIERS}
    cand[tier] = grid
    return simulate(plan.spec, cand).goodput.mean(1)


def _vertex(grid: np.ndarray, y: np.ndarray) -> float:
    i = int(np.argmax(y))
    lo, hi = max(i - 4, 0), min(i + 5, len(grid))
    u = np.log(grid[lo:hi])
    if hi - lo >= 3:
        a, b, _c = np.polyfit(u, y[lo:hi], 2)
        if a < 0:
            return float(np.exp(np.clip(-b / (2 * a), u[0], u[-1])))
    return float(grid[i])


def optimize(plan: Plan, passes: int = 2) -> tuple[dict[str, float | None], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """(optimal interval per tier, None where no failure restores from it; the last sweep per tier)."""
    yd = young_daly(plan)
    best = dict(plan.intervals)
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    tuned = [t for t in TIERS if yd[t] is not None]
    for _ in range(passes):
        for t in tuned:
            grid = _grid(plan, t, yd[t])
            y = sweep(plan, t, best, grid)
            best[t] = _vertex(grid, y)
            curves[t] = (grid, y)
    return {t: (best[t] if t in tuned else None) for t in TIERS}, curves


def curves_at(plan: Plan) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Goodput vs interval per tier around the current policy (for the page when not optimising)."""
    yd = young_daly(plan)
    out = {}
    for t in TIERS:
        if yd[t] is not None and math.isfinite(plan.intervals[t]):
            grid = _grid(plan, t, yd[t])
            out[t] = (grid, sweep(plan, t, plan.intervals, grid))
    return out
