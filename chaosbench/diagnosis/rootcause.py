"""Root cause across nodes: the first failure in time and its error, crash loops (one node's workers
failing restart after restart with the same error), and which errors were only consequences of it.

torchrun prints the error of the first failed rank of *its own* node; a harness that reads the last
exception of the first log names a peer's connection error, a consequence. Here every node's worker
failures are put on one time line: each failure is torchrun's "failed (exitcode: N) local_rank: R"
line (it has a time) and its error is the last exception the node's workers printed before it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .model import Evidence, RootCause
from .record import LogLine, RunRecord

FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
# errors a worker gets because *another* process failed or left: a peer's connection closing, the
# rendezvous closing or refusing, a collective timing out on a missing peer
CONSEQUENCE = re.compile(r"Rendezvous\w*Error|RendezvousClosed|DistBackendError|DistNetworkError|Connection (closed|reset)"
                         r"|closed by peer|Broken pipe|ECONNRESET|ECONNREFUSED|Connection refused|Socket Timeout"
                         r"|timed out|Timeout|SignalException|KeyboardInterrupt|NCCL communicator was aborted", re.I)
NUMBERS = re.compile(r"0x[0-9a-f]+|\d+")


@dataclass
class Failure:
    node: str
    local_rank: int
    exitcode: int
    at: LogLine                 # torchrun's "failed (exitcode ...)" line
    error: LogLine | None       # the last exception line before it, if the worker printed one

    @property
    def ts(self) -> float | None:
        return self.at.ts

    @property
    def consequence(self) -> bool:
        return self.error is not None and bool(CONSEQUENCE.search(self.error.text))

    def key(self) -> str:
        """The error without its numbers (pids, ports, addresses vary between restarts)."""
        return NUMBERS.sub("#", self.error.text) if self.error else f"exit code {self.exitcode}"


def failures(rec: RunRecord) -> list[Failure]:
    out = []
    for node, lines in rec.logs.items():
        errors = rec.errors(node)
        seen = 0                # errors already used by an earlier failure of this node
        for ln in lines:
            m = FAILED.search(ln.text)
            if not m:
                continue
            before = [e for e in errors if e.n < ln.n][seen:]
            out.append(Failure(node, int(m.group(2)), int(m.group(1)), ln, before[-1] if before else _fatal(rec, node, ln)))
            seen += len(before)
    return sorted(out, key=lambda f: (f.ts if f.ts is not None else float("inf"), f.node, f.at.n))


def _fatal(rec: RunRecord, node: str, at: LogLine) -> LogLine | None:
    """A job that logs its error as a `fatal` event (the reference trainer, chaosbench.instrument) rather
    than a traceback: the node's last fatal event up to the failure."""
    if at.ts is None:
        return None
    evs = [e for e in rec.events if e.get("event") == "fatal" and e.get("node") == node and e.get("error")
           and isinstance(e.get("ts"), (int, float)) and at.ts - 60 <= e["ts"] <= at.ts + 1]
    if not evs:
        return None
    e = evs[-1]
    return LogLine(node, 0, str(e["error"])[:400], e["ts"], src=f"events/ (fatal, rank {e.get('rank')})")


def _crash_loop(fs: list[Failure]) -> tuple[Failure, int]:
    """The node's longest run of consecutive failures with the same error: (first of them, length)."""
    best, best_n, cur, n = fs[0], 1, fs[0], 1
    for prev, f in zip(fs, fs[1:]):
        if f.key() == prev.key():
            n += 1
        else:
            cur, n = f, 1
        if n > best_n:
            best, best_n = cur, n
    return best, best_n


def _injected_before(rec: RunRecord, ts: float | None) -> dict | None:
    """The injected fault that came before a failure (the failure is then what the fault did)."""
    if ts is None:
        return None
    prior = [f for f in rec.faults if isinstance(f.get("injected_at"), (int, float)) and f["injected_at"] <= ts]
    return max(prior, key=lambda f: f["injected_at"]) if prior else None


def _fired_there(rec: RunRecord, fault: dict, node: str) -> bool:
    """A cooperative fault (worker_error, ...) fired inside this node's job: the error it raised there is
    what the fault did, not a cause of its own."""
    return any(e.get("event") == "fault_fired" and e.get("fault_id") == fault.get("id") and e.get("node") == node
               for e in rec.events)


def root_cause(rec: RunRecord) -> RootCause | None:
    fs = failures(rec)
    if not fs:
        return None
    by_node: dict[str, list[Failure]] = {}
    for f in fs:
        by_node.setdefault(f.node, []).append(f)
    # the first failure that is not itself a peer's reaction; if every one is, the first in time
    first = next((f for f in fs if not f.consequence), None)
    reaction = first is None
    first = first or fs[0]
    fault = _injected_before(rec, first.ts)
    _, repeats = _crash_loop([f for f in by_node[first.node] if f.ts is None or first.ts is None or f.ts >= first.ts])
    error = first.error.text if first.error else f"exit code {first.exitcode} (no exception printed)"
    who = f"{first.node}'s rank {first.local_rank}" if first.local_rank == 0 else \
        f"{first.node}'s local rank {first.local_rank}"
    by_fault = bool(fault and (reaction or not first.error or _fired_there(rec, fault, first.node)))
    if by_fault:
        # the injected fault started it: the workers' errors are what it did, not a cause of their own
        summary = (f"the injected fault {fault.get('id')} ({fault.get('type')} {fault.get('target') or ''}".rstrip()
                   + f"); {who} failed after it with: {error}")
    elif repeats > 1:
        summary = f"{who} failed {repeats} times with: {error}"
    else:
        summary = f"{who} failed first with: {error}"
    consequences, also = [], []
    for f in fs:
        if f.node == first.node or not f.error or (f.ts is not None and first.ts is not None and f.ts < first.ts):
            continue
        if f.key() == first.key():
            also.append(f.node)                    # the same error on its own: not a consequence
        elif f"{f.node}: {f.error.text}" not in consequences:
            consequences.append(f"{f.node}: {f.error.text}")
    also = sorted(set(also))
    if also:
        summary += f" (the same error on {', '.join(also)})"
    if consequences:
        summary += f"; then, as a consequence: {consequences[0]}"
    ev = [x.evidence() for x in (first.error, first.at) if x is not None]
    if repeats > 1:
        ev.append(Evidence(text=f"the same error ended {repeats} consecutive restarts of {first.node}'s workers",
                           source=f"logs/{first.node}.log", log=f"{first.node}.log"))
    return RootCause(summary=summary, node=first.node, error=error, first_failure_at=first.ts, repeats=repeats,
                     consequences=consequences[:5], evidence=ev, fault_id=fault.get("id") if by_fault else None)
