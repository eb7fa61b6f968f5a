"""Check catalogue: each check registers the `expect:` keys that ask for it, the way faults register.

The scenario model (which names `expect.optional` may list), the loader (does a scenario ask for
anything?), the runner (how many checks are pending) and `evaluate` all read this one list.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

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
        summary = help or ((fn.__doc__ or "").strip().splitlines() or [""])[0]
        _REGISTRY[name] = CheckDef(name, asked_by or ((name,) if not always else ()), always, last, fn, summary, needs)
        return fn
    return deco


def _load() -> dict[str, CheckDef]:
    # importing the modules registers their checks; within each group below, in this import order
    from chaosbench.checks import fault_outcomes, recovery_checks, run_checks, detection, slowdown  # noqa: F401,I001
    from chaosbench.checks import eviction, replicas, grace, settle  # noqa: F401,I001
    from chaosbench.checks import invariants  # noqa: F401,I001
    from chaosbench.checks import integrity  # noqa: F401,I001
    return _REGISTRY


def all_checks() -> list[CheckDef]:
    """Every check in report order: the ones `expect` asks for, then the always-on ones, the ending last."""
    return sorted(_load().values(), key=lambda d: (d.always, d.last))


def optional_names() -> list[str]:
    """The checks a scenario may allow to go unevaluated (`expect.optional`): those it asks for."""
    return [d.name for d in all_checks() if not d.always]


def _asks(e, key: str) -> bool:
    """A key asks when it is set: not None, not False, not its default (log_regex's empty list); 0 asks."""
    value = getattr(e, key)
    default = type(e).model_fields[key].get_default(call_default_factory=True)
    return value is not None and value is not False and value != default


def requested(e) -> list[CheckDef]:
    """The checks these expectations (a scenario's `expect`) ask for by one of their keys."""
    return [d for d in all_checks() if any(_asks(e, k) for k in d.asked_by)]


def pending_count(e) -> int:
    """How many results the asked-for checks will give (one per log_regex pattern); for progress display."""
    return sum(len(e.log_regex) if d.name == "log_regex" else 1 for d in requested(e) if not d.always)
