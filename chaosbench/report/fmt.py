"""Jinja filters: one place that decides how a number, or its absence, reads on the page.

A value of None means "not measured" (docs/result.md) and is never shown as zero.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from jinja2 import Undefined
from markupsafe import Markup, escape

NOT_MEASURED = Markup('<span class="nm">not measured</span>')


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _wrap(v: Any, text: str) -> Markup:
    return NOT_MEASURED if v is None or isinstance(v, Undefined) else escape(text)


def seconds(v: Any) -> Markup:
    if not _num(v):
        return _wrap(v, str(v))
    if abs(v) < 1:
        return escape(f"{v * 1000:.0f} ms")
    if abs(v) < 120:
        return escape(f"{v:.2f} s")
    return escape(f"{int(v // 60)} min {v % 60:.0f} s")


def nbytes(v: Any) -> Markup:
    if not _num(v):
        return _wrap(v, str(v))
    for unit in ("B", "KB", "MB", "GB"):
        if abs(v) < 1000 or unit == "GB":
            return escape(f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}")
        v /= 1000
    raise AssertionError("unreachable")


def number(v: Any, digits: int = 2) -> Markup:
    if not _num(v):
        return _wrap(v, str(v))
    return escape(f"{v:,}" if isinstance(v, int) else f"{v:,.{digits}f}")


def percent(v: Any) -> Markup:
    return escape(f"{v * 100:.0f}%") if _num(v) else _wrap(v, str(v))


def value(v: Any) -> Markup:
    """Expected/observed values of checks: any JSON."""
    if v is None or isinstance(v, Undefined):
        return NOT_MEASURED
    return escape(v if isinstance(v, str) else json.dumps(v))


def utc(ts: Any) -> Markup:
    if not _num(ts):
        return _wrap(ts, str(ts))
    return escape(dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))


def utc_short(ts: Any) -> Markup:
    if not _num(ts):
        return _wrap(ts, str(ts))
    return escape(dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M"))


FILTERS = {"utc_short": utc_short, "seconds": seconds, "nbytes": nbytes, "number": number, "percent": percent,
           "value": value, "utc": utc}
