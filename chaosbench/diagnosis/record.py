"""The recorded run, read once: everything diagnosis may look at comes from the run directory
(docs/result.md), never from a live cluster, so a finished run can be diagnosed anywhere, any time."""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from chaosbench.doctor.agent_logs import ERROR_LINE, line_ts
from chaosbench.jsonl import parse_jsonl

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


def _json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default


def _jsonl(path: Path) -> list[dict]:
    try:
        return parse_jsonl(path.read_text(encoding="utf-8", errors="replace").splitlines())
    except OSError:
        return []


@dataclass
class RunRecord:
    path: Path
    result: dict = field(default_factory=dict)
    harness: dict = field(default_factory=dict)
    scenario: dict = field(default_factory=dict)
    faults_log: list[dict] = field(default_factory=list)
    inventories: dict[str, dict] = field(default_factory=dict)   # fault id -> inventory at that fault
    checkpoints: dict = field(default_factory=dict)              # the inventory after the run
    inventory_files: dict[str, str] = field(default_factory=dict)  # fault id -> the file it was read from

    def inventory_source(self, fault_id: str) -> str:
        """Where an inventory came from, as the run directory names it (evidence links)."""
        return f"inventories/{self.inventory_files.get(fault_id, '')}"

    @classmethod
    def load(cls, run_dir: str | Path) -> "RunRecord":
        p = Path(run_dir)
        try:
            scenario = yaml.safe_load((p / "scenario.yaml").read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            scenario = {}
        invs, files = {}, {}
        for f in sorted((p / "inventories").glob("*.json")):
            inv = _json(f, None)
            if isinstance(inv, dict):
                fid = str(inv.get("fault_id") or f.stem)
                invs[fid], files[fid] = inv, f.name
        return cls(path=p, result=_dict(_json(p / "result.json", {})), harness=_dict(_json(p / "harness.json", {})),
                   scenario=scenario if isinstance(scenario, dict) else {}, faults_log=_jsonl(p / "faults.jsonl"),
                   inventories=invs, inventory_files=files, checkpoints=_dict(_json(p / "checkpoints.json", {})))

    # -- logs -------------------------------------------------------------------------------------
    @cached_property
    def logs(self) -> dict[str, list[LogLine]]:
        """node -> its log's lines; torchrun's glog lines carry a time, read against the run's start."""
        now = self.result.get("finished_at") or self.harness.get("stopped_at") or _mtime(self.path)
        out = {}
        for f in sorted((self.path / "logs").glob("node-*.log")):
            try:
                text = f.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            out[f.stem] = [LogLine(f.stem, i, t, _ts(t, now)) for i, t in enumerate(text.splitlines(), 1)]
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

    # -- events -----------------------------------------------------------------------------------
    @cached_property
    def agent_events(self) -> dict[str, list[dict]]:
        return {f.stem[len("agent-"):]: _jsonl(f) for f in sorted((self.path / "events").glob("agent-*.jsonl"))}

    @cached_property
    def events(self) -> list[dict]:
        """Trainer and node-watcher events of every rank, in time order."""
        evs = [e for f in sorted((self.path / "events").glob("events-*.jsonl")) for e in _jsonl(f)]
        return sorted(evs, key=lambda e: e.get("ts") or 0.0)

    # -- faults and recoveries --------------------------------------------------------------------
    @property
    def faults(self) -> list[dict]:
        """result.json's faults; before it is written (the runner asks for the root cause while it collects),
        the fault log's inject/heal lines."""
        listed = [f for f in self.result.get("faults") or [] if isinstance(f, dict)]
        if listed or not self.faults_log:
            return listed
        from chaosbench.report.timeline import faults_from_log
        return faults_from_log(self.faults_log)

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
