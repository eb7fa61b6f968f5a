"""The recorded run as diagnosis sees it: the run's History (chaosbench/checks/history.py, the one
parse of its events, logs and inventories) plus result.json and the fault log's own lines, never a
live cluster, so a finished run can be diagnosed anywhere, any time (docs/result.md)."""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from chaosbench import rundir
from chaosbench.checks.history import History
from chaosbench.jsonl import parse_jsonl
from chaosbench.scenario.names import fault_file_name

from .agent_logs import ERROR_LINE, line_ts
from .model import Evidence

# torchrun's "Starting elastic_operator with launch configs:" block: "<glog prefix>]   key : value"
LAUNCH_CFG = re.compile(r"\]\s{2,}(\w+)\s+:\s(.*)$")
WORKER = re.compile(r"^(?:\S+Z )?\[default(\d+)\]:(.*)$")   # a worker's output line under --tee


@dataclass
class LogLine:
    node: str
    n: int                     # 1-based line number in logs/<node>.log
    text: str
    ts: float | None           # the glog timestamp of torchrun's lines (workers' own lines have none)
    src: str | None = None     # set for an error read from an event file instead of the log

    def evidence(self) -> Evidence:
        if self.src:
            return Evidence(text=self.text.strip()[:400], source=self.src, ts=self.ts)
        return Evidence(text=self.text.strip()[:400], source=f"logs/{self.node}.log:{self.n}", ts=self.ts,
                        log=f"{self.node}.log", line=self.n)


def _json(run_dir: Path, rel: str, default: Any) -> Any:
    text = rundir.read_text(run_dir, rel)
    try:
        return json.loads(text) if text is not None else default
    except ValueError:
        return default


@dataclass
class RunRecord:
    path: Path
    history: History = field(default_factory=History)
    result: dict = field(default_factory=dict)   # result.json; {} while the analyse step has not written it
    faults_log: list[dict] = field(default_factory=list)   # faults.jsonl's own lines (heal figures, TCP counts)

    # what the History read, under the names the rules use
    @property
    def harness(self) -> dict:
        return self.history.harness

    @property
    def scenario(self) -> dict:
        return self.history.scenario

    @property
    def inventories(self) -> dict[str, dict]:
        """fault id -> the inventory taken at that fault."""
        return self.history.inventories

    @property
    def checkpoints(self) -> dict:
        """The inventory after the run ({} when none was taken)."""
        return self.history.inventory or {}

    @property
    def events(self) -> list[dict]:
        """Trainer and node-watcher events of every rank, in time order, as the checks judged them
        (clock-corrected, the watcher's duplicate steps left out)."""
        return self.history.events

    @property
    def agent_events(self) -> list[dict]:
        return self.history.agent_events

    def inventory_source(self, fault_id: str) -> str:
        """Where an inventory came from, as the run directory names it (evidence links)."""
        try:
            return f"inventories/{fault_file_name(fault_id)}"
        except ValueError:
            return "inventories/"

    @classmethod
    def of(cls, run_dir: str | Path, history: History, result: dict | None = None) -> "RunRecord":
        """The record of a run whose History is loaded already (the analyse step): nothing parsed again."""
        p = Path(run_dir)
        log = rundir.read_text(p, "faults.jsonl")
        return cls(path=p, history=history,
                   result=_dict(result if result is not None else _json(p, "result.json", {})),
                   faults_log=parse_jsonl(log.splitlines()) if log else [])

    @classmethod
    def load(cls, run_dir: str | Path) -> "RunRecord":
        """For a run directory on its own (`chaosbench doctor --run`): its History, loaded once."""
        return cls.of(run_dir, History.load(Path(run_dir)))

    # -- logs -------------------------------------------------------------------------------------
    @cached_property
    def logs(self) -> dict[str, list[LogLine]]:
        """node -> its log's lines (the History's text of logs/node-*.log); torchrun's glog lines carry a
        time, read against the run's end."""
        now = self.result.get("finished_at") or self.harness.get("stopped_at") or _mtime(self.path)
        out = {}
        for name, text in sorted(self.history.logs.items()):
            if "/" in name or not (name.startswith("node-") and name.endswith(".log")):
                continue
            node = name[:-len(".log")]
            out[node] = [LogLine(node, i, t, _ts(t, now)) for i, t in enumerate(text.splitlines(), 1)]
        return out

    def errors(self, node: str) -> list[LogLine]:
        """The exception lines of a node's log ("PermissionError: [Errno 13] ..."), torchrun's summary excluded."""
        out = []
        for ln in self.logs.get(node, []):
            m = ERROR_LINE.match(ln.text.strip())
            if m and "ChildFailedError" not in m.group(1):
                out.append(LogLine(node, ln.n, m.group(1), ln.ts))
        return out

    def worker_lines(self, node: str) -> list[LogLine]:
        out = []
        for ln in self.logs.get(node, []):
            m = WORKER.match(ln.text)
            if m:
                out.append(LogLine(node, ln.n, m.group(2), ln.ts))
        return out

    @cached_property
    def launch_configs(self) -> dict[str, dict[str, Any]]:
        """node -> the first launch-config block its torchrun agent logged ({'rdzv_backend': 'c10d', ...},
        rdzv_configs parsed to a dict), with `_line`: the log line where the block starts."""
        out = {}
        for node, lines in self.logs.items():
            cfg: dict[str, Any] = {}
            for i, ln in enumerate(lines):
                if "Starting elastic_operator with launch configs" not in ln.text:
                    continue
                cfg["_line"] = ln
                for nxt in lines[i + 1:i + 40]:
                    m = LAUNCH_CFG.search(nxt.text)
                    if not m:
                        if cfg.keys() - {"_line"}:
                            break
                        continue
                    key, value = m.group(1), m.group(2).strip()
                    if key == "rdzv_configs":
                        try:
                            value = ast.literal_eval(value)
                        except (ValueError, SyntaxError):
                            value = {}
                        cfg["_rdzv_line"] = nxt
                    cfg[key] = value
                break
            if cfg:
                out[node] = cfg
        return out

    # -- faults and recoveries --------------------------------------------------------------------
    @property
    def faults(self) -> list[dict]:
        """result.json's faults; before it is written (the analyse step finds the root cause before the
        checks), the History's fault windows: a cooperative fault at the time the job fired it."""
        listed = [f for f in self.result.get("faults") or [] if isinstance(f, dict)]
        if listed:
            return listed
        return [{"id": w.id, "type": w.fault, "target": w.target, "params": w.params,
                 "injected_at": w.injected_at, "healed_at": w.healed_at} for w in self.history.faults]

    @property
    def recoveries(self) -> list[dict]:
        return [r for r in self.result.get("recoveries") or [] if isinstance(r, dict)]

    def check(self, name: str) -> dict | None:
        return next((c for c in self.result.get("checks") or [] if isinstance(c, dict) and c.get("name") == name), None)

    @property
    def expect(self) -> dict:
        return _dict(self.scenario.get("expect"))

    @property
    def trainer(self) -> dict:
        return _dict(self.scenario.get("trainer"))

    @property
    def user_job(self) -> bool:
        t = self.trainer
        return bool(t.get("script") or t.get("module") or t.get("command"))


DOCKER_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\d*Z ")


def _ts(line: str, now: float) -> float | None:
    """docker's UTC prefix (`docker logs -t`), else torch's glog time (local time, no year)."""
    m = DOCKER_TS.match(line)
    if m:
        from datetime import datetime, timezone
        return datetime.fromisoformat(m.group(1)[:26]).replace(tzinfo=timezone.utc).timestamp()
    return line_ts(line, now)


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        import time
        return time.time()
