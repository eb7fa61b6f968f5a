"""Check catalogue: each check registers the `expect:` keys that ask for it, the way faults register.

The runner (how many checks are pending), `evaluate` and `chaosbench list` read this one list. The
names and keys themselves are the scenario language's (chaosbench/scenario/check_names.py), which the
scenario model and loader validate against without importing the checks; a check registered under a
name or keys that table does not hold, or a name there no check implements, is refused here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from chaosbench.scenario.check_names import ALWAYS, OPTIONAL, asks

_REGISTRY: dict[str, "CheckDef"] = {}


@dataclass(frozen=True)
class CheckDef:
    name: str                    # the result's name (log_regex and fault checks add ':<pattern or id>')
    asked_by: tuple[str, ...]    # the `expect:` keys that ask for it
    always: bool                 # evaluated whatever `expect` says (then asked_by only tunes it)
    last: bool                   # reported after every other check (the run's ending sums it up)
    fn: Callable[..., Any]       # (history, expect, recoveries) -> CheckResult | list | None
    help: str = ""               # one line: what it checks (`chaosbench list`)
    needs: str = ""              # what in the run record it needs to be evaluated (events, inventory, a fault...)


def check(name: str, *asked_by: str, always: bool = False, last: bool = False, help: str = "", needs: str = ""):
    """Register a check function under `name`; without keys, the `expect:` key of the same name asks for it.
    `help` (default: the function docstring's first line) and `needs` are what `chaosbench list` shows."""
    def deco(fn):
        keys = asked_by or ((name,) if not always else ())
        table = ALWAYS if always else OPTIONAL
        if table.get(name) != keys:
            raise ValueError(f"check '{name}' ({'always' if always else 'asked by ' + ', '.join(keys)}) is not in "
                             f"chaosbench/scenario/check_names.py {'ALWAYS' if always else 'OPTIONAL'}: add it there "
                             "with the same keys, or the scenario loader will not know it")
        summary = help or ((fn.__doc__ or "").strip().splitlines() or [""])[0]
        _REGISTRY[name] = CheckDef(name, keys, always, last, fn, summary, needs)
        return fn
    return deco


def _load() -> dict[str, CheckDef]:
    # importing the modules registers their checks; within each group below, in this import order
    from chaosbench.checks import fault_outcomes, recovery_checks, run_checks, detection, slowdown  # noqa: F401,I001
    from chaosbench.checks import eviction, replicas, grace, settle, quorum  # noqa: F401,I001
    from chaosbench.checks import invariants  # noqa: F401,I001
    from chaosbench.checks import integrity  # noqa: F401,I001
    unimplemented = (OPTIONAL.keys() | ALWAYS.keys()) - _REGISTRY.keys()
    if unimplemented:
        raise ValueError(f"chaosbench/scenario/check_names.py names checks no module registers: "
                         f"{', '.join(sorted(unimplemented))}; register them or drop them there")
    return _REGISTRY


def all_checks() -> list[CheckDef]:
    """Every check in report order: the ones `expect` asks for, then the always-on ones, the ending last; within
    each, the table's order (check_names.py), whichever module a caller happened to import first."""
    order = {name: i for i, name in enumerate([*OPTIONAL, *ALWAYS])}
    return sorted(_load().values(), key=lambda d: (d.always, d.last, order.get(d.name, len(order))))


def requested(e) -> list[CheckDef]:
    """The checks these expectations (a scenario's `expect`) ask for by one of their keys."""
    return [d for d in all_checks() if any(asks(e, k) for k in d.asked_by)]


def pending_count(e) -> int:
    """How many results the asked-for checks will give (one per log_regex pattern); for progress display."""
    return sum(len(e.log_regex) if d.name == "log_regex" else 1 for d in requested(e) if not d.always)
