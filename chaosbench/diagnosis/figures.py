"""Figures chaosbench measured itself, cited from docs/recovery.md (written by bench/recovery_targets.py),
so a finding's expected effect is a measurement with its source, not a promise. Nothing found: None."""
from __future__ import annotations

import re
from pathlib import Path

RECOVERY_DOC = Path(__file__).resolve().parents[2] / "docs" / "recovery.md"


def _rows() -> list[list[str]]:
    try:
        text = RECOVERY_DOC.read_text(encoding="utf-8")
    except OSError:
        return []
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and line.count("|") >= 5]


def measured(case: str, backend: str | None = None) -> str | None:
    """'0.77 s (0.55-1.04), against 49.29 s (63.9x) for stock torchrun in the same run (docs/recovery.md:
    crash, local, ...)' for the first table row whose case starts with `case`
    (and names `backend`, when one is given and a row does)."""
    rows = [r for r in _rows() if r[0].startswith(case) and len(r) >= 5]
    pick = [r for r in rows if backend and backend in r[0]] or rows
    if not pick:
        return None
    r = pick[0]
    got = r[3].replace("**", "")
    if not re.search(r"\d", got):
        return None
    stock = r[4].replace("**", "")
    if re.match(r"\d", stock):
        return f"{got}, against {stock} for stock torchrun in the same run (docs/recovery.md: {r[0]})"
    return f"{got} (docs/recovery.md: {r[0]}; stock torchrun: {stock})"
