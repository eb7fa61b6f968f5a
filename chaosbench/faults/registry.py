"""Fault catalogue: name -> class, with one-line help, and parameter validation for scenarios."""
from __future__ import annotations

from typing import Any

from chaosbench.faults.base import Fault

_REGISTRY: dict[str, type[Fault]] = {}


def register(cls: type[Fault]) -> type[Fault]:
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> dict[str, type[Fault]]:
    # importing the modules registers their faults
    from chaosbench.faults import inprocess, memory, names, network, nodes, packets, services, storage  # noqa: F401
    from chaosbench.faults import disks  # noqa: F401
    from chaosbench.faults import clocks  # noqa: F401
    from chaosbench.faults import ray  # noqa: F401
    return _REGISTRY


def fault_names() -> list[str]:
    return sorted(_load())


def get_fault(name: str) -> type[Fault]:
    return _load()[name]


def catalogue() -> list[tuple[str, str, str]]:
    """(name, one-line help, parameters) for `chaosbench list`."""
    rows = []
    for name, cls in sorted(_load().items()):
        params = []
        for fname, f in cls.Params.model_fields.items():
            params.append(fname if f.is_required() else f"{fname}={f.get_default(call_default_factory=True)!r}")
        rows.append((name, cls.help, ", ".join(params)))
    return rows


def validate_params(name: str, params: Any):
    """Returns the fault's typed params; raises pydantic.ValidationError (locations inside params)."""
    return get_fault(name).Params.model_validate(params if params is not None else {})
