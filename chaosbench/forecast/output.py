"""A forecast's figures: computed once from the simulator's outcome, printed as a table or --json."""
from __future__ import annotations

import math

import numpy as np
from rich.console import Console
from rich.table import Table

from chaosbench.instrument.tiers import TIERS
from .inputs import PHASES
from .plan import Plan
from .sim import Outcome

JSON_KEYS = ("goodput", "goodput_ci", "interruptions", "lost_hours_by_cause", "lost_hours_by_phase",
             "optimal_interval_s", "young_daly_interval_s", "assumptions")


def _r(x, nd=4):
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def figures(plan: Plan, out: Outcome, optimal: dict, young_daly: dict) -> dict:
    """The --json document (keys: JSON_KEYS), means over the simulated jobs."""
    spec = plan.spec
    g = out.goodput[0]
    by_phase = {p: out.down_by_phase[:, i].mean() / 3600 for i, p in enumerate(PHASES)}
    by_phase["recomputation"] = sum(v[0].mean() for v in out.recompute_by_class.values()) / 3600
    by_phase["checkpoint_stall"] = out.stall_s[0].mean() / 3600
    # recomputation per cause: its class's mean split by the causes' rates (causes of one class share
    # every draw but the cause label, so this is the expectation, not an approximation of it)
    by_cause = {}
    for ci, c in enumerate(spec.causes):
        k = spec.cause_class[ci]
        share = spec.rates_per_s[ci] / plan.class_rate_per_s(k)
        by_cause[c] = (out.down_by_cause[:, ci].mean() + share * out.recompute_by_class[k][0].mean()) / 3600
    return {
        "goodput": _r(g.mean()),
        "goodput_ci": [_r(np.percentile(g, 2.5)), _r(np.percentile(g, 97.5))],
        "interruptions": {c: _r(out.count_by_cause[:, i].mean(), 2) for i, c in enumerate(spec.causes)},
        "lost_hours_by_cause": {c: _r(v, 3) for c, v in by_cause.items()},
        "lost_hours_by_phase": {p: _r(v, 3) for p, v in by_phase.items()},
        "optimal_interval_s": {t: _r(optimal.get(t), 1) for t in TIERS},
        "young_daly_interval_s": {t: _r(young_daly.get(t), 1) for t in TIERS},
        "assumptions": list(plan.assumptions),
    }


def _dur(s) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    return f"{s:.3g} s" if s < 120 else f"{s / 60:.3g} min" if s < 7200 else f"{s / 3600:.3g} h"


def measured_rows(plan: Plan) -> list[list[str]]:
    """Per class used: recoveries measured, median and range of fault -> first step, join / degraded, tier."""
    out = []
    j, d = PHASES.index("join"), PHASES.index("degraded")
    for k, arr in sorted(plan.spec.recoveries.items()):
        tot = arr[:, :j].sum(1)
        out.append([k, str(len(arr)), f"{np.median(tot):.2f} ({tot.min():.2f}-{tot.max():.2f})",
                    f"{np.median(arr[:, j]):.2f} / {np.median(arr[:, d]):.2f}", plan.spec.restore_tier[k]])
    return out


def print_table(plan: Plan, fig: dict, console: Console) -> None:
    lo, hi = fig["goodput_ci"]
    t = Table(title=f"measured recoveries, carried to {plan.nodes} nodes (s)")
    for col in ("class", "recoveries", "fault -> first step, median (range)", "join / degraded, median",
                "restores from"):
        t.add_column(col)
    for row in measured_rows(plan):
        t.add_row(*row)
    console.print(t)
    console.print(f"[bold]forecast[/bold] {plan.gpus} GPUs ({plan.nodes} nodes), {plan.days:g} days, "
                  f"failures: {plan.model.name}; {plan.spec.trajectories} simulated jobs, seed {plan.spec.seed}",
                  highlight=False)
    console.print(f"goodput (ETTR) [bold]{100 * fig['goodput']:.2f} %[/bold]  (95 % of jobs {100 * lo:.2f}-{100 * hi:.2f} %), "
                  f"{sum(fig['interruptions'].values()):.1f} interruptions expected", highlight=False)
    t = Table(title="time lost by cause")
    t.add_column("cause"), t.add_column("class"), t.add_column("interruptions", justify="right"), t.add_column("hours lost", justify="right")
    for c, k in zip(plan.spec.causes, plan.spec.cause_class):
        t.add_row(c, k, f"{fig['interruptions'][c]:.1f}", f"{fig['lost_hours_by_cause'][c]:.2f}")
    console.print(t)
    t = Table(title="time lost by phase")
    t.add_column("phase"), t.add_column("hours", justify="right")
    for p, v in fig["lost_hours_by_phase"].items():
        t.add_row(p, f"{v:.3f}")
    console.print(t)
    t = Table(title="checkpoint interval per tier")
    for col in ("tier", "forecast with", "optimal", "Young/Daly", "stall per save"):
        t.add_column(col)
    for tier in TIERS:
        t.add_row(tier, _dur(plan.intervals[tier]), _dur(fig["optimal_interval_s"][tier]),
                  _dur(fig["young_daly_interval_s"][tier]), _dur(plan.spec.stall_s.get(tier)))
    console.print(t)
    console.print("[bold]assumptions[/bold]")
    for a in fig["assumptions"]:
        console.print(f"  - {a}", highlight=False, markup=False)
