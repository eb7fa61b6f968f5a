"""`chaosbench forecast`: a job's goodput at fleet scale, from its measured recoveries.

A discrete-event (Monte-Carlo) simulator joins two halves nobody joins otherwise: the failure side
from published fleets (presets) or the user's own rates, and the recovery side that chaosbench
measured on the user's own job (detection, rendezvous, restore, first step, lost work, checkpoint
stall per tier). Modules, each short:

    inputs.py    run directories -> measured recoveries per fault class, tiers, step time
    presets.py   built-in failure models with their sources (docs/plan-a-run.md)
    failures.py  a user's failure file, validated (file:line, field, fix)
    sim.py       the Monte-Carlo simulator (numpy, vectorised over trajectories and intervals)
    optimize.py  the checkpoint interval per tier that maximises goodput; Young/Daly beside it
    output.py    terminal table and --json;  html.py: the self-contained HTML page
    cli.py       the typer command (chaosbench/cli.py mounts it), bad input -> exit 2
"""


class ForecastError(Exception):
    """Bad input for a forecast: the message names what is missing and how to fix it (exit 2)."""


# The fault classes a failure cause maps to, and the library scenario that measures each.
SCENARIO_FOR_CLASS = {
    "node_loss": "scenarios/node_loss.yaml",
    "worker_crash": "scenarios/worker_crash.yaml",
    "hung_rank": "scenarios/network_partition.yaml (--backend docker)",
    "full_restart": "scenarios/total_failure_restart.yaml",
    "new_machines": "scenarios/total_failure_new_machines.yaml",
}
CLASSES = tuple(SCENARIO_FOR_CLASS)
