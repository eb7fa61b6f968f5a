"""The checks a scenario can ask for, by name, and the `expect:` keys that ask for each: the scenario
language's vocabulary of checks, as data. The scenario model validates `expect.optional` and
`expect.relax` against it and the loader refuses a scenario that asks for nothing, without importing
the checks (which import the model: chaosbench/checks/registry.py). The registry refuses a check
registered under a name or keys this table does not hold, and a name here no check implements.
"""
from __future__ import annotations

# check name -> the `expect:` keys that ask for it (in report order); `expect.optional` may list these
OPTIONAL: dict[str, tuple[str, ...]] = {
    "recovered_from": ("recovered_from", "resumed_at_step"),
    "max_lost_steps": ("max_lost_steps",),
    "max_recovery_seconds": ("max_recovery_seconds",),
    "world_size_after": ("world_size_after",),
    "world_sizes": ("world_sizes",),
    "reaches_step": ("reaches_step",),
    "no_restart": ("no_restart",),
    "loss_continuity": ("loss_continuity",),
    "checkpoints_valid": ("checkpoints_valid",),
    "no_fatal": ("no_fatal",),
    "log_regex": ("log_regex",),
    "max_detection_seconds": ("max_detection_seconds",),
    "max_slowdown": ("max_slowdown",),
    "evicts_straggler_within_s": ("evicts_straggler_within_s",),
    "replicas_agree": ("replicas_agree",),
    "saved_within_grace": ("saved_within_grace",),
    "trains_after_settle": ("trains_after_settle",),
    "quorum_recovery": ("quorum_recovery", "max_heal_seconds"),
}
# checks every run gets whatever `expect` says; a key may still tune one (ends: the expected ending)
ALWAYS: dict[str, tuple[str, ...]] = {
    "fault": (), "event_contract": (), "invariants": (), "record_integrity": (), "ending": ("ends",),
}
# the run-level invariants (checks/invariants.py) that `expect.relax` may name
INVARIANTS = ("progress", "liveness", "completeness", "numerics", "consistency", "evidence")


def asks(e, key: str) -> bool:
    """A key asks when it is set: not None, not False, not its default (log_regex's empty list); 0 asks."""
    value = getattr(e, key)
    default = type(e).model_fields[key].get_default(call_default_factory=True)
    return value is not None and value is not False and value != default


def asks_for_any(e) -> bool:
    """True when the expectations (a scenario's `expect`) ask for at least one check."""
    return any(asks(e, k) for keys in (*OPTIONAL.values(), *ALWAYS.values()) for k in keys)
