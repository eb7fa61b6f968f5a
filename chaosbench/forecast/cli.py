"""`chaosbench forecast RUN_DIR... --gpus N --days D --failures PRESET|FILE [...]`: a typer command like
every other (chaosbench/cli.py mounts it; `python -m chaosbench.forecast` runs it alone).

Exit 0 with a forecast; exit 2 on bad input (the message names what is missing and the fix).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import List, Optional

import typer
from rich.console import Console

from . import CLASSES, ForecastError

EXIT_BAD_INPUT = 2


def forecast(
    runs: List[Path] = typer.Argument(..., metavar="RUN_DIR",
                                      help="reports/<run-id> directories written by `chaosbench run`"),
    gpus: int = typer.Option(..., help="GPUs of the job to forecast"),
    gpus_per_node: int = typer.Option(8, help="GPUs per node"),
    days: float = typer.Option(..., help="length of the job"),
    failures: str = typer.Option(..., help="preset (llama3-405b, rsc) or a YAML/JSON file of causes"),
    interval: Optional[str] = typer.Option(None, help="checkpoint interval per tier, e.g. memory=30s,nvme=10m,s3=1h "
                                                      "(default: as measured in the runs)"),
    optimize: bool = typer.Option(False, "--optimize", help="search the interval per tier that maximises goodput"),
    assume: List[str] = typer.Option([], metavar="CLASS=MEASURED",
                                     help="borrow a measured class's recoveries for an unmeasured one (classes: "
                                          f"{', '.join(CLASSES)}); repeat for more"),
    replace_after: Optional[float] = typer.Option(None, metavar="S", help=(
        "elastic shrink: a lost node is replaced S seconds later, then joins with a second restart "
        "(default: a spare joins in the survivors' round, cost as measured)")),
    seed: int = typer.Option(0, help="random seed"),
    trajectories: int = typer.Option(1000, help="simulated jobs"),
    json_: bool = typer.Option(False, "--json", help="print the figures as JSON"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="write an HTML page with plots here"),
):
    """Forecast a job's goodput at fleet scale from its measured recoveries (docs/plan-a-run.md)."""
    args = SimpleNamespace(**locals())   # the options above, by name
    try:
        run(args)
    except ForecastError as e:
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def _assume(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        a, _, b = it.partition("=")
        if a not in CLASSES or b not in CLASSES:
            raise ForecastError(f"--assume: '{it}' is not CLASS=CLASS; classes: {', '.join(CLASSES)}")
        out[a] = b
    return out


def run(args: SimpleNamespace) -> None:
    from .failures import failure_model
    from .inputs import load_runs
    from .optimize import curves_at, optimize, young_daly
    from .output import figures, print_table
    from .plan import build, parse_intervals
    from .sim import simulate
    model = failure_model(args.failures)
    intervals = parse_intervals(args.interval)
    assume = _assume(args.assume)
    measured = load_runs([str(r) for r in args.runs])
    plan = build(measured, model, args.gpus, args.gpus_per_node, args.days, intervals, assume,
                 args.trajectories, args.seed, args.replace_after)
    outcome = simulate(plan.spec, {t: [v] for t, v in plan.intervals.items()})
    yd = young_daly(plan)
    optimal, curves = optimize(plan) if args.optimize else ({}, None)
    fig = figures(plan, outcome, optimal, yd)
    if args.json_:
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


def main(argv: list[str] | None = None) -> int:
    """`python -m chaosbench.forecast` and tests: the same command, its exit code returned."""
    app = typer.Typer(add_completion=False)
    app.command()(forecast)
    try:
        app(args=list(sys.argv[1:] if argv is None else argv), prog_name="chaosbench forecast")
    except SystemExit as e:   # typer exits 2 on a usage error, as on any bad input
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_BAD_INPUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
