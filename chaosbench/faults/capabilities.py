"""Which cluster primitives a fault needs, and which faults a backend cannot inject.

The one derivation behind `chaosbench list` and the runner's up-front refusal (exit 3 before
anything starts). A fault's needs follow from its parameters (`Fault.needs_for`), and
tests/faults/test_capabilities.py runs every variant against a recording cluster to hold each
declaration to the primitives the fault really calls.
"""
from __future__ import annotations

import itertools
from typing import Any, Iterable, Literal, get_args, get_origin

from pydantic import ValidationError

from chaosbench.faults.base import FaultParams
from chaosbench.faults.registry import fault_names, get_fault


def needs_of(kind: str, params: dict | FaultParams | None = None) -> frozenset[str]:
    """The cluster primitives a fault of this kind calls with these parameters."""
    cls = get_fault(kind)
    typed = params if isinstance(params, FaultParams) else cls.Params.model_validate(params or {})
    return cls.needs_for(typed)


def missing_primitives(faults: Iterable, supported: frozenset[str], why: dict[str, str] | None = None,
                       others: dict[str, frozenset[str]] | None = None) -> list[str]:
    """'<id> (<kind>) needs a, b' for each scenario fault entry (.id, .kind, .params) the backend cannot do;
    with `why` (primitive -> the backend's reason) and `others` (backend -> its primitives), also why
    not here and which backends have them."""
    out = []
    for f in faults:
        needed = needs_of(f.kind, f.params)
        missing = sorted(n for n in needed if n not in supported)
        if not missing:
            continue
        line = f"{f.id} ({f.kind}) needs {', '.join(missing)}"
        reasons = sorted({(why or {})[n] for n in missing if n in (why or {})})
        if reasons:
            line += f" ({'; '.join(reasons)})"
        if others is not None:
            have = [b for b, prims in others.items() if needed <= prims]
            line += f"; backends that have {'it' if len(missing) == 1 else 'them'}: {', '.join(have) or 'none'}"
        out.append(line)
    return out


def choices(kind: str) -> dict[str, tuple]:
    """The parameters a fault's needs can depend on, with their values: each Literal or bool field."""
    out = {}
    for name, field in get_fault(kind).Params.model_fields.items():
        if get_origin(field.annotation) is Literal:
            out[name] = get_args(field.annotation)
        elif field.annotation is bool:
            out[name] = (False, True)
    return out


def variants(kind: str) -> list[dict[str, Any]]:
    """Representative parameter sets of a fault: every combination of its choices. Other required
    fields take their first `examples` value; a combination the fault's own rules refuse with the
    defaults (a slicer toxic without its size) takes the first optional field example it accepts."""
    params_cls = get_fault(kind).Params
    options = choices(kind)
    fixed: dict[str, Any] = {}
    extras: list[dict[str, Any]] = [{}]
    for name, field in params_cls.model_fields.items():
        if name in options:
            continue
        if field.is_required():
            if not field.examples:
                raise TypeError(f"fault {kind}: required parameter '{name}' needs Field(examples=[...])")
            fixed[name] = field.examples[0]
        else:
            extras += [{name: example} for example in field.examples or []]
    out = []
    for combo in itertools.product(*options.values()):
        base = {**fixed, **dict(zip(options, combo))}
        accepted = next((p for p in ({**base, **x} for x in extras) if _valid(params_cls, p)), None)
        if accepted is None:
            raise TypeError(f"fault {kind}: no example makes {base} valid; add one to a field's examples")
        out.append(accepted)
    return out


def _valid(params_cls: type[FaultParams], params: dict) -> bool:
    try:
        params_cls.model_validate(params)
        return True
    except ValidationError:
        return False


def support(kind: str, supported: frozenset[str]) -> str:
    """One cell of `chaosbench list`: 'yes', '-', or 'only <param>=<values>' for the variants it can do."""
    sets = variants(kind)
    ok = [v for v in sets if needs_of(kind, v) <= supported]
    if len(ok) == len(sets):
        return "yes"
    if not ok:
        return "-"
    # each choice adds needs on its own, so the variants a backend can do are a product of values
    limits = []
    for name, values in choices(kind).items():
        can = list(dict.fromkeys(v[name] for v in ok))
        if len(can) < len(values):
            limits.append(f"{name}={'|'.join(map(str, can))}")
    return "only " + ", ".join(limits)


def support_table(backends: dict[str, frozenset[str]]) -> list[tuple[str, list[str]]]:
    """(fault, [cell per backend]) for every registered fault."""
    return [(kind, [support(kind, sup) for sup in backends.values()]) for kind in fault_names()]
