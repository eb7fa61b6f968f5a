"""The forecast as one self-contained HTML page: inline SVG plots, the run report's stylesheet.

Plots: goodput vs number of GPUs (the same job and policy at other sizes), goodput vs checkpoint
interval per tier (the optimizer's sweep, Young/Daly marked), and the loss breakdown by phase and
by cause. Geometry is computed here; the template only draws it (labels go through autoescaping).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
from jinja2 import ChoiceLoader, DictLoader, Environment, PackageLoader, select_autoescape

from .output import measured_rows
from .plan import Plan, build
from .sim import simulate

W, H, L, R, T, B = 520, 240, 64, 16, 16, 40
COLOURS = {"memory": "#2563eb", "nvme": "#059669", "s3": "#d97706", "goodput": "#7c3aed"}


def _line_chart(series: dict[str, tuple[list[float], list[float]]], xlabel: str, log_x: bool,
                marks: dict[str, float] | None = None, duration: bool = False) -> dict:
    """Polylines in a W x H box; y is goodput in %."""
    xs = [x for s in series.values() for x in s[0]]
    ys = [y for s in series.values() for y in s[1]]
    if not xs:
        return {"empty": True, "w": W, "h": H}
    f = (lambda v: math.log10(v)) if log_x else (lambda v: v)
    x0, x1 = f(min(xs)), f(max(xs))
    y0, y1 = min(ys), max(ys)
    pad = max((y1 - y0) * 0.1, 0.05)
    y0, y1 = y0 - pad, y1 + pad
    sx = lambda v: L + (f(v) - x0) / ((x1 - x0) or 1) * (W - L - R)   # noqa: E731
    sy = lambda v: T + (y1 - v) / ((y1 - y0) or 1) * (H - T - B)      # noqa: E731
    lines = [{"label": k, "colour": COLOURS.get(k, "#334155"),
              "points": " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in zip(*v))} for k, v in series.items()]
    xt = sorted(set(np.geomspace(min(xs), max(xs), 5) if log_x else np.linspace(min(xs), max(xs), 5)))
    yt = np.linspace(y0, y1, 5)
    return {"empty": False, "w": W, "h": H, "lines": lines, "xlabel": xlabel, "l": L, "r": W - R, "t": T, "b": H - B,
            "xticks": [{"pos": sx(v), "label": _fmt_x(v, duration)} for v in xt],
            "yticks": [{"pos": sy(v), "label": f"{v:.2f}"} for v in yt],
            "marks": [{"x": sx(v), "label": k, "colour": COLOURS.get(k.split()[0], "#334155")}
                      for k, v in (marks or {}).items() if v and min(xs) <= v <= max(xs)]}


def _fmt_x(v: float, duration: bool) -> str:
    if not duration:
        return f"{v:,.0f}"
    return f"{v:.3g}s" if v < 120 else f"{v / 60:.3g}m" if v < 7200 else f"{v / 3600:.3g}h"


def _bars(values: dict[str, float]) -> dict:
    items = [(k, v) for k, v in values.items() if v]
    top = max((v for _, v in items), default=0) or 1
    return {"rows": [{"label": k, "value": v, "w": 360 * v / top, "y": 6 + i * 22} for i, (k, v) in enumerate(items)],
            "h": 12 + 22 * len(items)}


def gpu_sweep(plan: Plan, trajectories: int = 200) -> tuple[list[float], list[float]]:
    """Goodput of the same job and policy at 1/16 .. 4x the GPU count (fewer simulated jobs each)."""
    xs, ys = [], []
    for k in (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1, 2, 4):
        g = max(plan.gpus_per_node, int(plan.gpus * k))
        if xs and g == xs[-1]:
            continue
        other = build(plan.measured, plan.model, g, plan.gpus_per_node, plan.days,
                      {t: v for t, v in plan.intervals.items() if math.isfinite(v)},
                      plan.assume, trajectories, plan.spec.seed, plan.replace_after_s) if g != plan.gpus else plan
        spec = dataclasses.replace(other.spec, trajectories=trajectories)
        ys.append(100 * float(simulate(spec, {t: [v] for t, v in plan.intervals.items()}).goodput.mean()))
        xs.append(g)
    return xs, ys


def write_page(path: Path, plan: Plan, fig: dict, curves: dict) -> Path:
    try:
        by_gpus = gpu_sweep(plan)
    except Exception:     # a size the inputs cannot cover (e.g. a borrowed class): plot the one point
        by_gpus = ([plan.gpus], [100 * fig["goodput"]])
    interval = _line_chart({t: (list(g), list(100 * y)) for t, (g, y) in curves.items()}, "checkpoint interval",
                           True, {f"{t} Young/Daly": v for t, v in fig["young_daly_interval_s"].items()}, duration=True)
    env = Environment(loader=ChoiceLoader([DictLoader({"forecast.html": TEMPLATE}),
                                           PackageLoader("chaosbench.report", "templates")]),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    html = env.get_template("forecast.html").render(
        plan=plan, fig=fig, gpus_chart=_line_chart({"goodput": by_gpus}, "GPUs", True),
        interval_chart=interval, phases=_bars(fig["lost_hours_by_phase"]),
        causes=_bars(fig["lost_hours_by_cause"]), runs=plan.measured.runs, measured=measured_rows(plan))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path


TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>forecast: {{ plan.gpus }} GPUs, {{ plan.days }} days</title>
<style>{% include "_style.css.j2" %}
svg .line { fill:none; stroke-width:2; } .row { display:flex; flex-wrap:wrap; gap:16px; }</style></head>
<body><main>
{%- macro chart(c, ylabel) -%}
{%- if c.empty %}<p class="nm">nothing to plot</p>{% else -%}
<svg class="chart" viewBox="0 0 {{ c.w }} {{ c.h }}" width="{{ c.w }}" role="img" xmlns="http://www.w3.org/2000/svg">
<rect x="{{ c.l }}" y="{{ c.t }}" width="{{ c.r - c.l }}" height="{{ c.b - c.t }}" class="plot-bg"/>
{%- for t in c.yticks %}<line x1="{{ c.l }}" x2="{{ c.r }}" y1="{{ t.pos }}" y2="{{ t.pos }}" class="grid"/>
<text x="{{ c.l - 6 }}" y="{{ t.pos + 4 }}" class="tick" text-anchor="end">{{ t.label }}</text>{% endfor %}
{%- for t in c.xticks %}<text x="{{ t.pos }}" y="{{ c.b + 15 }}" class="tick" text-anchor="middle">{{ t.label }}</text>{% endfor %}
<text x="{{ (c.l + c.r) / 2 }}" y="{{ c.h - 4 }}" class="axis-label" text-anchor="middle">{{ c.xlabel }}</text>
<text x="12" y="{{ (c.t + c.b) / 2 }}" class="axis-label" transform="rotate(-90 12 {{ (c.t + c.b) / 2 }})" text-anchor="middle">{{ ylabel }}</text>
{%- for m in c.marks %}<line x1="{{ m.x }}" x2="{{ m.x }}" y1="{{ c.t }}" y2="{{ c.b }}" stroke="{{ m.colour }}" stroke-dasharray="4 3"><title>{{ m.label }}</title></line>{% endfor %}
{%- for s in c.lines %}<polyline class="line" points="{{ s.points }}" stroke="{{ s.colour }}"><title>{{ s.label }}</title></polyline>
<text x="{{ c.r - 4 }}" y="{{ c.t + 14 + loop.index0 * 14 }}" class="tick" text-anchor="end" fill="{{ s.colour }}">{{ s.label }}</text>{% endfor %}
</svg>{% endif %}
{%- endmacro %}
{%- macro bars(b) -%}
<svg class="chart" viewBox="0 0 600 {{ b.h }}" width="600" xmlns="http://www.w3.org/2000/svg">
{%- for r in b.rows %}<text x="150" y="{{ r.y + 12 }}" class="tick" text-anchor="end">{{ r.label }}</text>
<rect x="156" y="{{ r.y }}" width="{{ r.w }}" height="16" fill="#7c3aed" fill-opacity="0.75"/>
<text x="{{ 160 + r.w }}" y="{{ r.y + 12 }}" class="tick">{{ "%.3g"|format(r.value) }} h</text>{% endfor %}
</svg>
{%- endmacro %}
<h1>Forecast: {{ plan.gpus }} GPUs ({{ plan.nodes }} nodes), {{ plan.days }} days, failures {{ plan.model.name }}</h1>
<section class="card"><h2>Goodput (effective training time ratio)</h2>
<p><b>{{ "%.2f"|format(100 * fig.goodput) }} %</b>; 95 % of {{ plan.spec.trajectories }} simulated jobs between
{{ "%.2f"|format(100 * fig.goodput_ci[0]) }} % and {{ "%.2f"|format(100 * fig.goodput_ci[1]) }} %;
{{ "%.1f"|format(fig.interruptions.values()|sum) }} interruptions expected. Failures: {{ plan.model.source }}.</p>
<div class="row"><div><h2>Goodput vs GPUs</h2>{{ chart(gpus_chart, "goodput %") }}</div>
<div><h2>Goodput vs checkpoint interval, per tier</h2>{{ chart(interval_chart, "goodput %") }}</div></div></section>
<section class="card"><h2>Time lost by phase</h2>{{ bars(phases) }}<h2>Time lost by cause</h2>{{ bars(causes) }}</section>
<section class="card"><h2>Checkpoint interval per tier</h2><table><tr><th>tier</th><th class="num">forecast with (s)</th>
<th class="num">optimal (s)</th><th class="num">Young/Daly (s)</th><th class="num">stall per save (s)</th></tr>
{%- for t, v in plan.intervals.items() %}<tr><td>{{ t }}</td><td class="num">{{ "%.4g"|format(v) }}</td>
<td class="num">{{ fig.optimal_interval_s[t] if fig.optimal_interval_s[t] is not none else "-" }}</td>
<td class="num">{{ fig.young_daly_interval_s[t] if fig.young_daly_interval_s[t] is not none else "-" }}</td>
<td class="num">{{ "%.4g"|format(plan.spec.stall_s[t]) }}</td></tr>{% endfor %}</table></section>
<section class="card"><h2>Measured recoveries (s, carried to {{ plan.nodes }} nodes)</h2><table><tr><th>class</th>
<th class="num">recoveries</th><th>fault &rarr; first step, median (range)</th><th class="num">join / degraded, median</th><th>restores from</th></tr>
{%- for r in measured %}<tr><td>{{ r[0] }}</td><td class="num">{{ r[1] }}</td><td>{{ r[2] }}</td><td class="num">{{ r[3] }}</td><td>{{ r[4] }}</td></tr>{% endfor %}
</table><h2>Measured runs</h2><ul>{% for r in runs %}<li class="mono">{{ r }}</li>{% endfor %}</ul>
<h2>Assumptions</h2><ul>{% for a in fig.assumptions %}<li>{{ a }}</li>{% endfor %}</ul></section>
</main></body></html>
"""
