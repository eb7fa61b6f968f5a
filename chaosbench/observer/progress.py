"""Live view of a run for the progress display and the stop conditions (not for checks)."""
from __future__ import annotations

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
        elif name == "run_complete":
            self.finished_nodes.add(node)
