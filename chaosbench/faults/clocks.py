"""Clock faults: one node's wall clock jumps (an NTP step) or runs fast or slow, for its training's processes.

Mechanism: libfaketime preloaded into every process of the node's training from the node's start
whenever the scenario has a clock_skew (ClusterSpec.fake_clock, read where the node is launched, so it
holds across node restarts), reading its offset from a per-node control file that holds "+0" until the
fault (cluster/node/clock.py). What moves: time(), gettimeofday(), clock_gettime(CLOCK_REALTIME) in
every dynamically linked process of the node; CLOCK_MONOTONIC does not (an NTP step does not move it
either). Refused where a backend cannot start its nodes under the preload (Slurm: the nodes are launched
by srun in the site's environment).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from chaosbench.faults.base import NODE_NAME, Fault, FaultParams
from chaosbench.faults.registry import register

MECHANISM = "libfaketime LD_PRELOAD (FAKETIME_TIMESTAMP_FILE, cache 0, DONT_FAKE_MONOTONIC)"
MOVED = ["time()", "gettimeofday()", "clock_gettime(CLOCK_REALTIME)"]
KEPT = ["CLOCK_MONOTONIC", "CLOCK_BOOTTIME", "raw clock_gettime syscalls", "statically linked programs"]


class ClockParams(FaultParams):
    node: str = Field("random", pattern=NODE_NAME)
    offset_s: float | None = Field(None, ge=-86400 * 365, le=86400 * 365, examples=[30.0])   # a step of the wall clock
    drift_ppm: float | None = Field(None, ge=-500_000, le=500_000)   # or a clock running this many ppm fast (< 0: slow)
    clocks: Literal["realtime", "all"] = "realtime"

    @model_validator(mode="after")
    def _one_skew(self):
        if (self.offset_s is None) == (self.drift_ppm is None):
            raise ValueError("give exactly one of offset_s (a jump of the wall clock, e.g. 30 or -30) or drift_ppm "
                             "(a clock running fast or slow, e.g. 500)")
        if (self.offset_s if self.offset_s is not None else self.drift_ppm) == 0:
            raise ValueError("offset_s / drift_ppm is 0: a clock fault that moves nothing proves nothing")
        return self


@register
class ClockSkew(Fault):
    name = "clock_skew"
    help = ("one node's wall clock jumps by offset_s or drifts by drift_ppm (libfaketime preloaded into its "
            "training from its start); CLOCK_MONOTONIC stays, as with an NTP step")
    Params = ClockParams
    needs = ("skew_clock", "restore_clock")
    default_duration_s = 20.0

    @classmethod
    def needs_for(cls, params: ClockParams) -> frozenset[str]:
        # clocks: all needs CLOCK_MONOTONIC moved too, which no backend does (Cluster.skew_monotonic says why)
        return frozenset(cls.needs) | ({"skew_monotonic"} if params.clocks == "all" else set())

    def _inject(self):
        from chaosbench.cluster.node.clock import control_text
        self.target = self.pick_node(self.p.node)
        if self.p.clocks == "all":
            self.cluster.skew_monotonic(self.target)
        self.control = control_text(self.p.offset_s, self.p.drift_ppm)
        # a drifting clock starts where the real one is: libfaketime scales from each process's start,
        # so a fresh probe reads ~0 at once
        self.seen = self.cluster.skew_clock(self.target, self.control, self.p.offset_s or 0.0)

    def _heal(self):
        self.healed = self.cluster.restore_clock(self.target)

    def _record(self, action: str, started: float) -> float:
        from chaosbench.cluster.node.clock import NO_SKEW
        seen = self.seen if action == "inject" else self.healed
        return self.ctx.log.record(self.id, self.name, action, self.target, {
            **self.p.model_dump(), "mechanism": MECHANISM, "control": self.control if action == "inject" else NO_SKEW,
            "clocks_moved": MOVED, "clocks_kept": KEPT, **(seen or {})}, started)

    def inject(self) -> float:
        """The record says the mechanism, what it wrote, which clocks moved and what a probe on the node read."""
        import time
        started = time.time()
        self._inject()
        self.injected = True
        return self._record("inject", started)

    def heal(self) -> float | None:
        import time
        if not self.injected:
            return None
        started = time.time()
        self._heal()
        self.injected = False
        return self._record("heal", started)
