"""`chaosbench forecast RUN_DIR... --gpus N --days D --failures PRESET|FILE [...]`.

Exit 0 with a forecast; exit 2 on bad input (the message names what is missing and the fix).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from . import CLASSES, ForecastError


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="chaosbench forecast",
        description="Forecast a job's goodput at fleet scale from its measured recoveries (docs/plan-a-run.md).")
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="reports/<run-id> directories written by `chaosbench run`")
    ap.add_argument("--gpus", type=int, required=True, help="GPUs of the job to forecast")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--days", type=float, required=True, help="length of the job")
    ap.add_argument("--failures", required=True, help="preset (llama3-405b, rsc) or a YAML/JSON file of causes")
    ap.add_argument("--interval", help="checkpoint interval per tier, e.g. memory=30s,nvme=10m,s3=1h "
                                       "(default: as measured in the runs)")
    ap.add_argument("--optimize", action="store_true", help="search the interval per tier that maximises goodput")
    ap.add_argument("--assume", action="append", default=[], metavar="CLASS=MEASURED",
                    help=f"borrow a measured class's recoveries for an unmeasured one (classes: {', '.join(CLASSES)})")
    ap.add_argument("--replace-after", type=float, metavar="S",
                    help="elastic shrink: a lost node is replaced S seconds later, then joins with a second restart "
                         "(default: a spare joins in the survivors' round, cost as measured)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trajectories", type=int, default=1000, help="simulated jobs (default 1000)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("-o", "--output", type=Path, help="write an HTML page with plots here")
    return ap


def _assume(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        a, _, b = it.partition("=")
        if a not in CLASSES or b not in CLASSES:
            raise ForecastError(f"--assume: '{it}' is not CLASS=CLASS; classes: {', '.join(CLASSES)}")
        out[a] = b
    return out


def run(argv: list[str]) -> int:
    from .failures import failure_model
    from .inputs import load_runs
    from .optimize import curves_at, optimize, young_daly
    from .output import figures, print_table
    from .plan import build, parse_intervals
    from .sim import simulate
    args = _parser().parse_args(argv)
    model = failure_model(args.failures)
    intervals = parse_intervals(args.interval)
    assume = _assume(args.assume)
    measured = load_runs(args.runs)
    plan = build(measured, model, args.gpus, args.gpus_per_node, args.days, intervals, assume,
                 args.trajectories, args.seed, args.replace_after)
    outcome = simulate(plan.spec, {t: [v] for t, v in plan.intervals.items()})
    yd = young_daly(plan)
    optimal, curves = optimize(plan) if args.optimize else ({}, None)
    fig = figures(plan, outcome, optimal, yd)
    if args.json:
        print(json.dumps(fig, indent=1))
    else:
        console = Console(soft_wrap=True)
        print_table(plan, fig, console)
        if args.optimize:   # the forecast above is for the given policy; this is what the optimum buys
            best = {t: [v if v is not None else plan.intervals[t]] for t, v in optimal.items()}
            g = simulate(plan.spec, best).goodput.mean()
            console.print(f"at the optimal intervals: goodput {100 * g:.2f} % "
                          f"({100 * (g - fig['goodput']):+.2f} pp)", highlight=False)
    if args.output:
        from .html import write_page
        write_page(args.output, plan, fig, curves if curves is not None else curves_at(plan))
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(list(sys.argv[1:] if argv is None else argv))
    except ForecastError as e:
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    except SystemExit as e:   # argparse: a usage error is bad input too
        return 2 if e.code not in (0, None) else 0


if __name__ == "__main__":
    sys.exit(main())
