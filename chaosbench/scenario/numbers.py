"""Numbers in a scenario are numbers: YAML's `true` is no step and `.inf` no duration.

Pydantic reads `true` as 1 for an int field and takes `.inf`/`.nan` for a float one, so
`step: true` fired at step 1 and `max_recovery_seconds: .inf` judged nothing. One rule for every
int or float field, of the scenario's own models (a before-validator on model.Strict) and of each
fault's parameters (the loader runs it over them): a boolean or a non-finite number is refused there,
naming the field. Upper bounds ("sane maxima") are each field's `le=` in model.py.
"""
from __future__ import annotations

import math
import types
import typing
from typing import Any

from pydantic import BaseModel


def _scalars(ann: Any) -> set:
    """The scalar types an annotation admits directly (through Optional, unions and Annotated)."""
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _scalars(typing.get_args(ann)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_scalars(a) for a in typing.get_args(ann)))
    return {ann} if ann in (int, float, bool) else set()


def _containers(ann: Any) -> list[tuple[type, Any]]:
    """(list or dict, element annotation) for each container an annotation admits."""
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _containers(typing.get_args(ann)[0])
    if origin in (typing.Union, types.UnionType):
        return [c for a in typing.get_args(ann) for c in _containers(a)]
    if origin in (list, dict):
        return [(origin, typing.get_args(ann)[-1] if typing.get_args(ann) else Any)]
    return []


def problem(ann: Any, value: Any) -> str | None:
    """Why `value` is no number for a field annotated `ann`, or None."""
    kinds = _scalars(ann)
    if isinstance(value, bool):
        if kinds & {int, float} and bool not in kinds:
            return (f"{str(value).lower()} is a YAML boolean, not a number: write the number itself "
                    f"(a bare true would be read as 1)")
        return None
    if isinstance(value, float) and not math.isfinite(value) and float in kinds:
        return f"{value} is not a finite number: give a finite value"
    for kind, elem in _containers(ann):
        items = value.values() if kind is dict and isinstance(value, dict) else \
            value if kind is list and isinstance(value, list) else ()
        for item in items:
            why = problem(elem, item)
            if why:
                return why
    return None


def field_problems(model: type[BaseModel], data: Any) -> list[tuple[str, str]]:
    """(field, why) for each field of `model` whose raw value in `data` is no number where one belongs."""
    if not isinstance(data, dict):
        return []
    out = []
    for name, info in model.model_fields.items():
        key = info.alias if info.alias in data else name
        if key in data:
            why = problem(info.annotation, data[key])
            if why:
                out.append((key, why))
    return out
