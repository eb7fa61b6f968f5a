"""The rendezvous phase of bench/recovery.py split by the surviving agent's own log lines.

The phase runs from the survivor's first sign (`fatal`, `health_check_failed`) to the first event of
its new worker (chaosbench.checks.recovery). torchrun logs at INFO (the harness sets LOGLEVEL=INFO)
when it decides to restart its workers, when it enters the rendezvous and when the round and the
rank assignment are done, so the phase splits into:

  notice  first sign -> the agent decides to restart (a failed worker seen by its monitor loop, or a
          dead member of the round: `num_nodes_waiting`); may be negative when liveness is first
  stop    -> `Rendezvous'ing worker group`: the old workers stopped (SIGTERM, wait for the exit)
  round   `Rendezvous'ing worker group` -> `Rendezvous complete for workers` (next_rendezvous + ranks)
  start   round done -> the new worker's first event (process start: warm-start client, fork, argv)

torch's lines carry glog time (`I1128 09:41:07.287000`: local time, no year), chaosbench's own
lines `2026-11-28 09:41:07,262`; both are read as local time, the year taken from the fault.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

SPLIT = ("notice_s", "stop_s", "round_s", "start_s")   # they add up to the rendezvous phase
_GLOG = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d\.\d+) ")
_MARKS = (("notice", "will restart worker group"), ("round", "Rendezvous'ing worker group"),
          ("done", "Rendezvous complete for workers"))


def _glog_ts(line: str, year: int) -> float | None:
    m = _GLOG.match(line)
    if not m:
        return None
    mon, day, hh, mm, ss = m.groups()
    whole = time.mktime((year, int(mon), int(day), int(hh), int(mm), int(float(ss)), 0, 0, -1))
    return whole + float(ss) % 1


def agent_marks(log: Path, after: float) -> dict[str, float]:
    """The first time after `after` each mark was logged by torchrun's agent in `log`."""
    year = time.localtime(after).tm_year
    marks: dict[str, float] = {}
    if not log.is_file():
        return marks
    with open(log, errors="replace") as f:
        for line in f:
            ts = _glog_ts(line, year)
            if ts is None or ts < after:
                continue
            for name, text in _MARKS:
                if name not in marks and text in line:
                    marks[name] = ts
    return marks


def split(log: Path, fault_ts: float, sign_ts: float, first_new_ts: float) -> dict[str, float | None]:
    """notice/stop/round/start in seconds (None where the agent log lacks the line)."""
    m = agent_marks(log, fault_ts)
    out: dict[str, float | None] = dict.fromkeys(SPLIT)
    if "notice" in m:
        out["notice_s"] = round(m["notice"] - sign_ts, 3)
    if "notice" in m and "round" in m:
        out["stop_s"] = round(m["round"] - m["notice"], 3)
    if "round" in m and "done" in m:
        out["round_s"] = round(m["done"] - m["round"], 3)
    if "done" in m:
        out["start_s"] = round(first_new_ts - m["done"], 3)
    return out
