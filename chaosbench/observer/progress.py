"""Live view of a run for the progress display and the stop conditions (not for checks)."""
from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field


@dataclass
class Progress:
    phase: str = "starting"                 # harness phase: starting, cluster_up, training, collecting, checks, done
    step: int = 0                           # highest step any rank reported
    world_size: int | None = None
    trainer_phases: dict[str, str] = field(default_factory=dict)   # node -> latest trainer phase
    faults_injected: int = 0
    faults_pending: int = 0
    checks_pending: int = 0
    events_seen: int = 0
    last_progress_at: float = field(default_factory=time.time)
    finished_nodes: set[str] = field(default_factory=set)          # nodes whose ranks emitted run_complete
    message: str = ""
    last_fatal: str = ""                                           # node: error of the newest fatal event
    # the current unbroken run of steps; kept only for a run whose stop rule counts them (runner)
    stretch: "Stretch | None" = None
    acted: dict[str, float] = field(default_factory=dict)          # cooperative fault id -> when the job said it acted

    def update(self, ev: dict) -> None:
        self.events_seen += 1
        name = ev.get("event")
        node = str(ev.get("node", "?"))
        if name == "step":
            step = int(ev.get("step", 0))
            if step > self.step:
                self.step = step
                self.last_progress_at = time.time()
            self.world_size = ev.get("world_size", self.world_size)
            if self.stretch is not None:
                self.stretch = self.stretch.after(ev, time.time())
            if ev.get("observed"):   # a job without phase events: its steps are all we know of its phase
                self.trainer_phases[node] = f"training (restart {ev.get('restart_count', '?')})"
        elif name == "worker_start":   # the node watcher saw a worker process start (docs/byo-trainer.md)
            self.trainer_phases[node] = f"worker started, no progress yet (restart {ev.get('restart_count', '?')})"
        elif name == "worker_exit":
            self.trainer_phases[node] = f"worker exited (restart {ev.get('restart_count', '?')})"
        elif name == "phase":
            # phases alone are not progress: a crash-looping trainer restarts forever without a step
            self.trainer_phases[node] = f"{ev.get('phase')} (restart {ev.get('restart_count', '?')})"
        elif name == "fatal":
            self.last_fatal = f"{node}: {ev.get('error_type', '')} {str(ev.get('error', ''))[:200]}".strip()
        elif name in ("fault_fired", "fault_refused"):
            self.acted.setdefault(str(ev.get("fault_id")), time.time())
        elif name == "run_complete":
            self.finished_nodes.add(node)


@dataclass
class Stretch:
    """Steps trained without a break: one world size, no node restarting, no step going back.

    The settle stop rule (scenario/stop.py) counts steps within it: a restart, a node joining or
    leaving, or a restore to an older step starts a new stretch, so steps of a round that is about
    to be torn down never count as settled training.
    """
    world: int | None = None
    restarts: dict[str, object] = field(default_factory=dict)    # node -> restart_count its steps carry
    top: int = -1                                                 # highest step in the stretch
    marks: list[tuple[float, int]] = field(default_factory=list)  # (seen at, new highest step)

    def after(self, ev: dict, now: float) -> "Stretch":
        step, world, node = int(ev.get("step", 0)), ev.get("world_size"), str(ev.get("node", "?"))
        broken = (self.marks and (world != self.world or step < self.marks[0][1]
                  or (node in self.restarts and self.restarts[node] != ev.get("restart_count"))))
        cur = Stretch(world) if broken or not self.marks else self
        cur.restarts[node] = ev.get("restart_count")
        if step > cur.top:
            cur.top = step
            cur.marks.append((now, step))
        return cur

    def steps_since(self, t: float) -> int:
        """Steps this stretch trained after time t (its first step counts when it came after t)."""
        if not self.marks:
            return 0
        i = bisect.bisect_right(self.marks, t, key=lambda m: m[0])   # marks come in time order
        return self.top - (self.marks[i - 1][1] if i else self.marks[0][1] - 1)
