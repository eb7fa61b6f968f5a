"""When the harness received each event line, and the timeline corrected by it under clock skew.

A node's `ts` is its own wall clock: a node whose clock jumped 30 s (clock_skew, or real NTP trouble on
Slurm hosts) would otherwise turn into a 30-s "recovery time" or events ordered before their cause.
The live tail (tail.EventTail) appends one receipt per file and poll to received.jsonl in the run
directory: {"rx": harness time, "file": name, "end": byte offset read up to}. The history then gives
each line its receipt time rx and d = ts - rx, which is the node's skew minus the delay before the
harness read the line (>= 0, about one poll). A batch's last line is the freshest, so its d is the
batch's skew estimate s. An event moves only where the skew is beyond THRESHOLD_S:
  - |s| > T and the event is in the same regime (|d - s| <= T): ts -= s; the same with the file's
    previous batch's s (the clock stepped back between the batch's lines);
  - else d > T (stamped in the harness's future: no delay does that, only a clock ahead): ts -= d;
  - below T a skew is corrected too when it is measured, not guessed: s > NOISE_S (the batch's
    freshest line stamped in the harness's future: only a clock ahead does that) takes s off, and
    d > NOISE_S takes d off; a clock behind is measured when even the longest read delay cannot
    explain s: the line was not there at the previous poll, so its delay is at most the time since
    that poll (`gap`), and s + gap < -NOISE_S means the clock is behind: s is taken off;
  - else unchanged: a run without skew (no s or d above NOISE_S, no batch behind beyond its gap)
    keeps every ts as written.
The original stamp stays in `ts_node`. What stays uncorrected is carried as an uncertainty instead
(`skew_state`): per node the largest |s| left in place, which timing checks hold their margins
against (checks/record.py: History.timing_caveat). Without receipts the skew is unknown: zero where
every node shares the harness's clock (local and docker backends, no clock fault), unbounded else.
"""
from __future__ import annotations

import bisect
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

RECEIPTS = "received.jsonl"
THRESHOLD_S = 2.0
NOISE_S = 0.05       # below this a stamp ahead of the harness is clock-reading noise (NTP between hosts)
POLL_SLACK_S = 0.05  # receipts of one poll (one per file read) lie this close: one poll, not several
ONE_CLOCK = ("local", "docker")   # backends whose nodes all read the harness host's clock


def write_receipts(path: Path, receipts: list[tuple[str, int, float]]) -> None:
    """Append (file name, end offset, rx) receipts; best effort (the run goes on without them)."""
    if not receipts:
        return
    try:
        with open(path, "a") as f:
            f.write("".join(json.dumps({"rx": round(rx, 4), "file": name, "end": end}) + "\n"
                            for name, end, rx in receipts))
    except OSError:
        pass


def _receipts(path: Path) -> dict[str, tuple[list[int], list[float]]]:
    out: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    for line in lines:
        try:
            r = json.loads(line)
            ends, rxs = out[str(r["file"])]
            ends.append(int(r["end"]))
            rxs.append(float(r["rx"]))
        except (ValueError, KeyError, TypeError):
            continue
    return dict(out)


def _key(ev: dict) -> tuple:
    return (ev.get("node"), ev.get("local_rank"), ev.get("pid"), ev.get("event"), ev.get("ts"))


def received_batches(events_dir: Path, receipts_path: Path) -> dict[tuple, tuple]:
    """event key -> (rx, d, batch id 'file:n', s, the file's previous batch's s, the line's end offset) for
    every line the live tail received."""
    out = {}
    receipts = _receipts(receipts_path)
    polls = sorted(rx for _, rxs in receipts.values() for rx in rxs)
    for name, (ends, rxs) in receipts.items():
        try:
            path = Path(events_dir) / name
            if path.is_symlink():   # never read through a planted link (rundir.py)
                continue
            data = path.read_bytes()
        except OSError:
            continue
        batches: dict[int, list[tuple[tuple, float]]] = defaultdict(list)
        pos = 0
        while True:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            end, line, pos = nl + 1, data[pos:nl], nl + 1
            i = bisect.bisect_left(ends, end)   # the first poll that read up to this line's end
            if i == len(ends):
                break
            try:
                ev = json.loads(line)
                ts = float(ev["ts"])
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(ev, dict):
                batches[i].append((_key(ev), ts, end))
        prev = None
        for i, evs in sorted(batches.items()):
            rx = rxs[i]
            s = evs[-1][1] - rx
            hi = s + _since_previous_poll(polls, rx)
            for key, ts, end in evs:
                out[key] = (rx, ts - rx, f"{name}:{i}", s, prev, end, hi)
            prev = s
    return out


def _since_previous_poll(polls: list[float], rx: float) -> float:
    """The longest a line read at rx can have waited: the time since the poll before (any file's
    receipt, earlier than this poll by more than the slack); inf for the first poll."""
    i = bisect.bisect_left(polls, rx - POLL_SLACK_S)
    return rx - polls[i - 1] + POLL_SLACK_S if i else float("inf")


def corrected_ts(d: float, s: float, s_prev: float | None = None, threshold: float = THRESHOLD_S,
                 hi: float | None = None) -> float | None:
    """How much to take off an event's ts (None: nothing), from its own d, its batch's s and the batch
    before's (a line written just before the clock stepped back, read with the first lines after it);
    `hi`: the largest skew the batch's read delay allows (s + the time since the previous poll)."""
    for est in (s, s_prev):
        if est is not None and abs(est) > threshold and abs(d - est) <= threshold:
            return est
    if d > threshold:
        return d
    same = abs(d - s) <= threshold
    if same and (s > NOISE_S or (hi is not None and hi < -NOISE_S)):   # a skew below T, measured
        return s
    if d > NOISE_S:
        return d
    return None


def correct(events: list[dict], events_dir: Path, receipts_path: Path) -> dict[str, dict]:
    """Correct skewed nodes' ts in place (re-sorted by the corrected ts); per node what was measured:
    {'max_s', 'min_s' (the batches' skew estimates), 'skewed_s' (receipt time spent beyond the
    threshold, from first to last such batch), 'corrected' (events moved)}."""
    got = received_batches(events_dir, receipts_path)
    per_node: dict[str, dict] = {}
    batch_s: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
    for ev in events:
        hit = got.get(_key(ev))
        if hit is None:
            continue
        rx, d, batch, s, s_prev, _, hi = hit
        node = str(ev.get("node"))
        off = corrected_ts(d, s, s_prev, hi=hi)
        batch_s[node][batch] = (rx, s, batch_s[node].get(batch, (0, 0, False))[2] or off is not None)
        if off is not None:
            ev["ts_node"] = ev["ts"]
            ev["ts"] = ev["ts"] - off
            per_node.setdefault(node, {"corrected": 0})["corrected"] += 1
    for node, batches in batch_s.items():
        ss = [s for _, s, _ in batches.values()]
        skewed = sorted(rx for rx, s, _ in batches.values() if abs(s) > THRESHOLD_S)
        left = [abs(s) for _, s, moved in batches.values() if not moved]   # skew (or read delay) left in place
        per_node.setdefault(node, {"corrected": 0}).update(
            max_s=round(max(ss), 3), min_s=round(min(ss), 3),
            skewed_s=round(skewed[-1] - skewed[0], 1) if skewed else 0.0,
            uncertain_s=round(max(left, default=0.0), 3))
    if any(v["corrected"] for v in per_node.values()):
        _keep_file_order(events, got)
        events.sort(key=lambda e: e.get("ts", 0.0))
    return per_node


def _keep_file_order(events: list[dict], got: dict) -> None:
    """A file's lines were written in order: a re-timed line (within a poll of its truth) never passes a
    neighbour in its own file; it is held just inside them."""
    files: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for ev in events:
        hit = got.get(_key(dict(ev, ts=ev.get("ts_node", ev.get("ts")))))
        if hit is not None:
            name, _, line = hit[2].rpartition(":")
            files[name].append((hit[5], ev))
    for lines in files.values():
        lines.sort(key=lambda x: x[0])
        evs = [e for _, e in lines]
        for a, b in zip(evs, evs[1:]):          # after the line before it
            if "ts_node" in b and b["ts"] <= a["ts"]:
                b["ts"] = a["ts"] + 1e-6
        for a, b in zip(reversed(evs[:-1]), reversed(evs[1:])):   # before the line after it
            if "ts_node" in a and a["ts"] >= b["ts"]:
                a["ts"] = b["ts"] - 1e-6


@dataclass
class SkewState:
    """Per node, whether its clock skew is known (receipts) and how far its `ts` may still be off the
    harness's clock (`bound_s`; None: no bound). `why` says where an unknown skew comes from."""
    known: bool = True
    bound_s: dict[str, float | None] = field(default_factory=dict)
    why: str = ""

    @property
    def worst_s(self) -> float | None:
        """The largest bound over the nodes (None: some node has none)."""
        vals = list(self.bound_s.values())
        return None if any(v is None for v in vals) else max(vals, default=0.0)


def skew_state(measured: dict[str, dict] | None, nodes: list[str], backend: str | None, clock_fault: bool) -> SkewState:
    """The skew uncertainty of a run: from the receipts' measurements (`correct`'s per-node record),
    or, without receipts (`measured` None), zero where every node reads the harness's own clock."""
    if measured is not None:
        return SkewState(True, {n: float(measured.get(n, {}).get("uncertain_s", 0.0)) for n in nodes})
    one_clock = backend in ONE_CLOCK and not clock_fault
    why = (f"no {RECEIPTS} in the record, so no node's clock skew was measured"
           + (f"; every node read the harness host's clock ({backend} backend, no clock fault), so it is taken as 0"
              if one_clock else f"; the nodes' clocks ({backend or 'unknown'} backend"
              + (", a clock fault planned" if clock_fault else "") + ") may be off by any amount"))
    return SkewState(False, {n: 0.0 if one_clock else None for n in nodes}, why)
