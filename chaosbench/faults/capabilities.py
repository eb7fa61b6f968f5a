"""Which cluster primitives a fault needs, and which faults a backend cannot inject.

The one derivation behind `chaosbench list` and the runner's up-front refusal (exit 3 before
anything starts)."""
from __future__ import annotations

from typing import Iterable

from chaosbench.faults.registry import get_fault


def needs_of(kind: str, params: dict | None = None) -> frozenset[str]:
    """The cluster primitives a fault of this kind calls with these parameters."""
    return frozenset(get_fault(kind).needs)


def missing_primitives(faults: Iterable, supported: frozenset[str]) -> list[str]:
    """'<id> (<kind>) needs a, b' for each scenario fault entry (.id, .kind, .params) the backend cannot do."""
    out = []
    for f in faults:
        missing = sorted(n for n in needs_of(f.kind, f.params) if n not in supported)
        if missing:
            out.append(f"{f.id} ({f.kind}) needs {', '.join(missing)}")
    return out
