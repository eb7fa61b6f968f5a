"""Human and machine output for check results and run diagnoses."""
from __future__ import annotations

import json

from .result import CheckResult, Status, worst

COLORS = {Status.PASS: "green", Status.WARN: "yellow", Status.FAIL: "red", Status.SKIP: "dim"}


def render_checks(results: list[CheckResult], console=None) -> None:
    from rich.console import Console
    from rich.markup import escape
    console = console or Console()
    for r in results:
        c = COLORS[r.status]
        console.print(f"[{c}]{r.status.value:4}[/{c}] [bold]{escape(r.name)}[/bold] "
                      f"[dim]({r.duration_s * 1000:.0f} ms)[/dim]\n      {escape(r.evidence)}")
        if r.fix and r.status in (Status.FAIL, Status.WARN):
            console.print(f"      [bold]fix:[/bold] {escape(r.fix)}")
    counts = {s: sum(r.status == s for r in results) for s in Status}
    console.print(f"\n{worst(results).value}: " + ", ".join(f"{n} {s.value}" for s, n in counts.items() if n))


def checks_json(results: list[CheckResult]) -> str:
    return json.dumps({"status": worst(results).value, "checks": [r.to_dict() for r in results]}, indent=2)
