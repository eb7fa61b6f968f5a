"""A run directory as the mutation operators edit it: every line of every events file (raw where it
does not parse), the fault log, the harness record, the inventories and the receipts.

Receipts (received.jsonl) name byte offsets in the events files, so an operator that adds or drops a
line would shift every later line onto the wrong receipt and fake a clock skew. Each line therefore
carries its own receipt time (`RX`, taken off again on save) and the receipts are written anew from
the lines: an operator that moves a line in time moves its receipt with it, and a mutated record
differs from the real one only where the operator meant it to.
"""
from __future__ import annotations

import bisect
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RX = "\x00rx"   # a line's receipt time; never written


@dataclass
class Record:
    dir: Path
    files: dict[str, list] = field(default_factory=dict)   # events/<name> -> lines: dict, or str (unparsable)
    faults: list[dict] = field(default_factory=list)
    harness: Any = None
    inventories: dict[str, Any] = field(default_factory=dict)   # inventories/<name> -> json
    checkpoints: Any = None
    result: Any = None
    has_receipts: bool = False

    @classmethod
    def load(cls, run_dir: Path) -> "Record":
        run_dir = Path(run_dir)
        rec = cls(run_dir)
        receipts = _receipts(run_dir / "received.jsonl")
        rec.has_receipts = (run_dir / "received.jsonl").is_file()
        for p in sorted((run_dir / "events").glob("*.jsonl")):
            data, pos, lines = p.read_bytes(), 0, []
            ends, rxs = receipts.get(p.name, ([], []))
            for raw in data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"):
                pos += len(raw) + 1
                try:
                    line = json.loads(raw)
                except ValueError:
                    line = None
                if not isinstance(line, dict):
                    lines.append(raw.decode(errors="replace"))
                    continue
                i = bisect.bisect_left(ends, pos)
                if i < len(ends):
                    line[RX] = rxs[i]
                lines.append(line)
            rec.files[p.name] = lines
        rec.faults = [json.loads(x) for x in _text(run_dir / "faults.jsonl").splitlines() if x.strip()]
        rec.harness = _json(run_dir / "harness.json")
        rec.checkpoints = _json(run_dir / "checkpoints.json")
        rec.result = _json(run_dir / "result.json")
        for p in sorted((run_dir / "inventories").glob("*.json")):
            rec.inventories[p.name] = _json(p)
        return rec

    def save(self) -> None:
        receipts = []
        for name, lines in self.files.items():
            slots = [i for i, x in enumerate(lines) if isinstance(x, dict)]
            ordered = sorted((lines[i] for i in slots), key=lambda e: e.get("ts", 0.0))
            for i, ev in zip(slots, ordered):
                lines[i] = ev
            out, pos = [], 0
            for i, x in enumerate(lines):
                text = x if isinstance(x, str) else json.dumps({k: v for k, v in x.items() if k != RX})
                out.append(text + "\n")
                pos += len(out[-1].encode())
                rx = x.get(RX) if isinstance(x, dict) else None
                nxt = lines[i + 1] if i + 1 < len(lines) else None
                if rx is not None and not (isinstance(nxt, dict) and nxt.get(RX) == rx):
                    receipts.append({"rx": rx, "file": name, "end": pos})
            (self.dir / "events" / name).write_text("".join(out))
        if self.has_receipts:   # per file in file order: a reader bisects each file's offsets
            (self.dir / "received.jsonl").write_text("".join(json.dumps(r) + "\n" for r in receipts))
        if (self.dir / "faults.jsonl").is_file():
            (self.dir / "faults.jsonl").write_text("".join(json.dumps(f) + "\n" for f in self.faults))
        for name, value in (("harness.json", self.harness), ("checkpoints.json", self.checkpoints),
                            ("result.json", self.result)):
            if value is not None and (self.dir / name).is_file():
                (self.dir / name).write_text(json.dumps(value, indent=1))
        for name, value in self.inventories.items():
            if (self.dir / "inventories" / name).is_file():
                (self.dir / "inventories" / name).write_text(json.dumps(value, indent=1))

    # -- what operators ask of a run --------------------------------------------------------------
    def lines(self, workers_only: bool = True):
        """(file name, event) for every parsed line, workers' files only unless asked."""
        for name, lines in self.files.items():
            if workers_only and not name.startswith("events-"):
                continue
            for x in lines:
                if isinstance(x, dict):
                    yield name, x

    def injections(self) -> list[dict]:
        return [f for f in self.faults if f.get("action") == "inject"]

    def shift_after(self, t: float, dt: float) -> None:
        """Everything the record dates after t happens dt later: events (and their receipts), fault
        actions, the harness's stop and collection, the inventories taken, the run's finish."""
        for _, ev in self.lines(workers_only=False):
            if ev.get("ts", 0.0) > t:
                ev["ts"] += dt
                if ev.get(RX) is not None:
                    ev[RX] += dt
                for k in ("started_at", "ts_node"):
                    if isinstance(ev.get(k), (int, float)):
                        ev[k] += dt
        for f in self.faults:
            if f.get("ts", 0.0) > t:
                f["ts"] += dt
        for doc in [self.harness, self.checkpoints, self.result, *self.inventories.values()]:
            if isinstance(doc, dict):   # stopped_at, collected_at, taken_at, finished_at, ...
                for k, v in doc.items():
                    if k.endswith("_at") and isinstance(v, (int, float)) and not isinstance(v, bool) and v > t:
                        doc[k] += dt

    def add(self, name: str, template: dict, ts: float, **changes) -> dict:
        """A new line in file `name` like `template` at time ts, received as promptly as the template was."""
        ev = {**template, **changes, "ts": ts}
        if template.get(RX) is not None:
            ev[RX] = ts + (template[RX] - template["ts"])
        self.files[name].append(ev)
        return ev

    def delete(self, name: str) -> None:
        """Remove a part of the record from disk (and from what save writes)."""
        path = self.dir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        if name.startswith("events/"):
            self.files.pop(name.removeprefix("events/"), None)
        elif name == "received.jsonl":
            self.has_receipts = False


def _receipts(path: Path) -> dict[str, tuple[list[int], list[float]]]:
    out: dict[str, tuple[list[int], list[float]]] = {}
    for line in _text(path).splitlines():
        r = json.loads(line)
        ends, rxs = out.setdefault(r["file"], ([], []))
        ends.append(int(r["end"]))
        rxs.append(float(r["rx"]))
    return out


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def _json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None
