"""What a node's torchrun agent log says about rendezvous, for nodes whose workers never started."""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

JOIN_ATTEMPT = re.compile(r"attempts to join the next round|Rendezvous'ing worker group|rendezvous.*(waiting|keep-alive)",
                          re.I)
JOINED = re.compile(r"has joined round \d+ of the .*rendezvous|Rendezvous complete for workers", re.I)


@dataclass
class AgentLog:
    node: str
    path: str
    age_s: float                 # since the log was last written
    in_rendezvous: bool          # last rendezvous line is a join attempt, not a completed join
    last_rdzv_line: str | None
    last_line: str | None

    def to_dict(self) -> dict:
        return asdict(self)


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
                             last_rdzv.strip()[:300] if last_rdzv else None,
                             lines[-1].strip()[:300] if lines else None)
    return out
