"""What a node's torchrun agent log says: rendezvous state for nodes whose workers never started (doctor
--run), and the last exception line and glog timestamps the diagnosis reads (diagnosis/record.py)."""
from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

JOIN_ATTEMPT = re.compile(r"attempts to join the next round|Rendezvous'ing worker group|rendezvous.*(waiting|keep-alive)",
                          re.I)
# torch's glog-style prefix: I1121 05:14:55.816000 <pid> file:line] message (local time, no year)
GLOG_TS = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2}(?:\.\d+)?) ")
JOINED = re.compile(r"has joined round \d+ of the .*rendezvous|Rendezvous complete for workers", re.I)


@dataclass
class AgentLog:
    node: str
    path: str
    age_s: float                 # since the log was last written
    in_rendezvous: bool          # last rendezvous line is a join attempt, not a completed join
    rdzv_since: float | None     # when that join attempt was logged (None: the log has no timestamps)
    last_rdzv_line: str | None
    last_line: str | None

    def to_dict(self) -> dict:
        return asdict(self)


def line_ts(line: str, now: float) -> float | None:
    m = GLOG_TS.match(line)
    if not m:
        return None
    year = time.localtime(now).tm_year
    mon, day, hh, mm, ss = m.groups()
    ts = time.mktime((year, int(mon), int(day), int(hh), int(mm), int(float(ss)), 0, 0, -1)) + float(ss) % 1
    return ts - 366 * 86400 if ts > now + 86400 else ts   # a log from last December read in January


def read_agent_logs(logs_dir: Path, now: float) -> dict[str, AgentLog]:
    out = {}
    for path in sorted(Path(logs_dir).glob("node-*.log")):
        node = path.stem
        try:
            text = path.read_text(errors="replace")
            mtime = os.stat(path).st_mtime
        except OSError:
            continue
        lines = [line for line in text.splitlines() if line.strip()]
        state, last_rdzv = False, None
        for line in lines:
            if JOINED.search(line):
                state, last_rdzv = False, line
            elif JOIN_ATTEMPT.search(line):
                state, last_rdzv = True, line
        out[node] = AgentLog(node, str(path), max(0.0, now - mtime), state,
                             line_ts(last_rdzv, now) if state and last_rdzv else None,
                             last_rdzv.strip()[:300] if last_rdzv else None,
                             lines[-1].strip()[:300] if lines else None)
    return out


# a Python exception's last line ("ModuleNotFoundError: No module named 'x'"), behind docker's timestamp
# and torchrun's "[default0]:" worker prefix; torchrun's own summary lines are not errors of the job
# (or argparse's "train.py: error: unrecognized arguments")
# an exception's last line behind docker's timestamp and any "[default0]:[rank0]:" prefixes (torch >= 2.4 adds
# "[rankN]:" to a worker's uncaught exception), or argparse's "train.py: error: ..."; the diagnosis reads it too
ERROR_LINE = re.compile(r"^(?:\S+Z )?(?:\[\w+\]:\s*)*((?:[\w.]+(?:Error|Exception|Interrupt)|[\w.-]+: error): .+)$")


def last_error(log_path: Path) -> str | None:
    """The last exception line of a node's log: why a node that exited did, in one line."""
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return None
    found = None
    for line in text.splitlines():
        m = ERROR_LINE.match(line.strip())
        if m and "ChildFailedError" not in m.group(1):
            found = m.group(1)
    return found[:300] if found else None
